//! Reading `INFO` and `CLUSTER INFO` replies.

/// The value of `name:value` in an `INFO` or `CLUSTER INFO` reply.
pub(crate) fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}
