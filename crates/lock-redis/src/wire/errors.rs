//! Redis errors mapped onto the one distlock [`Error`].

use std::time::Duration;

use lock_core::Error;
use lock_core::error::Cause;
use redis::{ErrorKind, RedisError};

/// Maps a redis-rs error to a distinct [`Error`] kind. `timeout` is the call timeout, reported
/// when the call timed out.
pub(crate) fn map_error(error: &RedisError, timeout: Duration) -> Error {
    if error.is_timeout() {
        return Error::Timeout { after: timeout };
    }
    let text = error.to_string();
    // The redis-rs error stays behind the message as the error's `source()`.
    let cause = || Cause::with_source(text.clone(), error.clone());
    match error.code() {
        Some("WRONGTYPE") => return Error::WrongType(cause()),
        Some("READONLY") => return Error::ReadOnly(cause()),
        Some("NOPERM" | "WRONGPASS" | "NOAUTH") => return Error::NotPermitted(cause()),
        Some("ERR") if refused_in_script(error) => return Error::NotPermitted(cause()),
        _ if refused_select(&text) => return Error::NotPermitted(cause()),
        Some("OOM") => return Error::OutOfMemory(cause()),
        code if refused_for_now(code) => return Error::Unavailable(cause()),
        _ => {}
    }
    match error.kind() {
        ErrorKind::AuthenticationFailed => Error::NotPermitted(cause()),
        ErrorKind::InvalidClientConfig => Error::InvalidConfig { reason: text },
        // The connection ended inside a reply: the request was sent and may have run, its
        // answer cannot be read. A lost connection, as the backend contract counts it
        // (docs/writing-a-backend.md), so the Locker settles what it may have left; as a
        // `Protocol` error a grant cut off this way stayed on the server, unknown to its owner.
        ErrorKind::Parse if cut_off(&text) => Error::ConnectionLost(cause()),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Error::Protocol(cause()),
        _ if error.is_io_error() || error.is_connection_dropped() => Error::ConnectionLost(cause()),
        _ if error.is_unrecoverable_error() => Error::ConnectionLost(cause()),
        _ => Error::Backend(cause()),
    }
}

/// Whether the text of a parse error says the reply stopped short: the decoder (redis-rs's,
/// built on `combine`) met the end of the stream inside a reply, which it reports as an
/// unexpected end of input. Bytes that are no reply at all say what they are instead.
fn cut_off(text: &str) -> bool {
    // Both parts of the decoder's wording ("Parse error at <offset>", then "Unexpected end of
    // input"), so that a conversion error quoting a value with these words is not taken for it.
    text.contains("Parse error at") && text.contains("Unexpected end of input")
}

/// Whether an error reply with `code` is a refusal that passes: the command did not run, and
/// sent again later it may (the server loading its data or busy with a script, cut off from
/// its primary or short of replicas for a write, a cluster slot moving or down).
pub(crate) fn refused_for_now(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "NOREPLICAS")
    )
}

/// Whether `error` is the ACL refusing a command a script called (`redis.call('hset', …)`, or
/// a key or channel it named): the server answers `ERR`, not `NOPERM`, there. Redis 7.2+ and
/// Valkey say `ACL failure in script: …`, Redis 7.0 `The user executing the script can't …`.
fn refused_in_script(error: &RedisError) -> bool {
    error.detail().is_some_and(|detail| {
        detail.starts_with("ACL failure in script")
            || detail.starts_with("The user executing the script can't")
    })
}

/// Whether `text` is the ACL refusing the `SELECT` of a URL's database when connecting:
/// redis-rs reports it with its own words and the server's text, without the `NOPERM` code.
fn refused_select(text: &str) -> bool {
    text.contains("refused to switch database")
        && text.to_ascii_lowercase().contains("no permissions")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error reply as the server sends it.
    fn server_error(code: &str, detail: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{code} {detail}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(error)) => error.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn the_redis_error_is_the_source() {
        use std::error::Error as _;
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let mapped = map_error(&RedisError::from(io), Duration::ZERO);
        assert!(matches!(mapped, Error::ConnectionLost(_)), "{mapped:?}");
        let source = mapped.source().expect("a source");
        let redis_error = source
            .downcast_ref::<RedisError>()
            .expect("the redis-rs error");
        assert!(redis_error.is_io_error());
        let io = redis_error.source().expect("the I/O error below it");
        assert!(io.to_string().contains("reset by peer"), "{io}");

        let oom = map_error(&server_error("OOM", "no memory"), Duration::ZERO);
        let source = oom.source().expect("a source");
        assert_eq!(
            source
                .downcast_ref::<RedisError>()
                .and_then(RedisError::code),
            Some("OOM")
        );
    }

    #[test]
    fn a_reply_cut_off_is_a_lost_connection_and_garbage_a_protocol_error() {
        // The errors redis-rs's stream decoder gives (its `decode_eof`, in the words
        // `reply_lost.rs` sees through a proxy that cuts a reply), and a conversion error
        // quoting a value with the same words.
        let decoder = |text: &str| RedisError::from(redis::ParsingError::from(text.to_owned()));
        let cut = decoder("Parse error at 0\nUnexpected end of input\nUnexpected `49`\n");
        assert!(matches!(
            map_error(&cut, Duration::ZERO),
            Error::ConnectionLost(_)
        ));
        let garbage = decoder("Parse error at 0\nUnexpected `H`\nExpected `*`, `$`, `:`\n");
        assert!(matches!(
            map_error(&garbage, Duration::ZERO),
            Error::Protocol(_)
        ));
        let conversion = decoder(
            "\"Response was of incompatible type\" (value was \"Unexpected end of input\")",
        );
        assert!(matches!(
            map_error(&conversion, Duration::ZERO),
            Error::Protocol(_)
        ));
    }

    #[test]
    fn acl_refusals_inside_scripts_are_not_permitted() {
        for detail in [
            // Valkey 9 (and Redis 7.2+).
            "ACL failure in script: User locks has no permissions to run the 'hset' command \
             script: 1a2b, on @user_script:36.",
            // Redis 7.0.
            "The user executing the script can't run this command or subcommand script: 1a2b, \
             on @user_script:36.",
            "The user executing the script can't access at least one of the keys mentioned in \
             the command script: 1a2b, on @user_script:9.",
        ] {
            let mapped = map_error(&server_error("ERR", detail), Duration::ZERO);
            assert!(
                matches!(mapped, Error::NotPermitted(_)),
                "{detail}: {mapped:?}"
            );
        }
        let other = map_error(&server_error("ERR", "Error running script"), Duration::ZERO);
        assert!(matches!(other, Error::Backend(_)), "{other:?}");
        let noperm = map_error(&server_error("NOPERM", "no rights"), Duration::ZERO);
        assert!(matches!(noperm, Error::NotPermitted(_)), "{noperm:?}");
    }

    #[test]
    fn a_refused_select_when_connecting_is_not_permitted() {
        let select = |detail: &str| -> RedisError {
            (
                redis::ServerErrorKind::ResponseError.into(),
                "Redis server refused to switch database",
                detail.to_owned(),
            )
                .into()
        };
        for detail in [
            "this user has no permissions to run the 'select' command",
            "User locks has no permissions to run the 'select' command",
        ] {
            let mapped = map_error(&select(detail), Duration::ZERO);
            assert!(
                matches!(mapped, Error::NotPermitted(_)),
                "{detail}: {mapped:?}"
            );
        }
        let out_of_range = map_error(&select("DB index is out of range"), Duration::ZERO);
        assert!(
            !matches!(out_of_range, Error::NotPermitted(_)),
            "{out_of_range:?}"
        );
    }
}
