//! Listing the names in use ([`PostgresBackend::list_names`]), matched against a glob.

use lock_core::{Error, Result};

use crate::backend::PostgresBackend;
use crate::key::LockKey;

/// What [`PostgresBackend::list_names`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NameList {
    /// The matching names, in byte order.
    pub names: Vec<String>,
    /// Whether every name in use was looked at (false: the limit stopped the walk).
    pub complete: bool,
}

/// How many names one statement brings back while walking.
const PAGE: usize = 500;

impl PostgresBackend {
    /// The names that hold something in any kind of the family (live locks of every kind,
    /// elections, semaphores, open latches) and match `pattern`, a glob (`*`, `?`, `[…]` with
    /// `!` or `^` to negate and `a-z` ranges; `\` escapes), as Redis's `SCAN MATCH` reads it.
    /// At most `limit` names are looked at, in pages of a few hundred.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] for a zero `limit`, before any I/O; the connection's errors.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(backend: lock_postgres::PostgresBackend) -> lock_core::Result<()> {
    /// let listed = backend.list_names("orders:*", 10_000).await?;
    /// for name in &listed.names {
    ///     println!("{name}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list_names(&self, pattern: &str, limit: usize) -> Result<NameList> {
        if limit == 0 {
            return Err(Error::InvalidOptions {
                reason: "the listing's limit must be at least 1".into(),
            });
        }
        let mut listed = NameList::default();
        let mut after: Option<Vec<u8>> = None;
        let mut looked_at = 0;
        // Any connection will do: listing orders nothing.
        let slot_key = LockKey::of("");
        loop {
            let page = PAGE.min(limit - looked_at);
            let page_i32 = i32::try_from(page).unwrap_or(i32::MAX);
            let rows = self
                .family_rows(
                    &slot_key,
                    "SELECT name FROM distlock.names($1, $2)",
                    &[&after, &page_i32],
                )
                .await?;
            looked_at += rows.len();
            for row in &rows {
                let bytes: Vec<u8> = row.get(0);
                if let Ok(name) = String::from_utf8(bytes.clone())
                    && glob_matches(pattern.as_bytes(), name.as_bytes())
                {
                    listed.names.push(name);
                }
                after = Some(bytes);
            }
            if rows.len() < page {
                listed.complete = true;
                return Ok(listed);
            }
            if looked_at >= limit {
                return Ok(listed);
            }
        }
    }
}

/// Whether `text` matches the glob `pattern` (Redis's `stringmatchlen` rules: `*` any run, `?`
/// one byte, `[abc]`, `[a-z]`, `[!a]`/`[^a]`, `\x` the byte `x`).
pub(crate) fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where to resume after the last `*`: its pattern position and the text position it covers to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, t));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => class(pattern, p, text[t]),
            Some(b'\\') if p + 1 < pattern.len() => (pattern[p + 1] == text[t]).then_some(p + 2),
            Some(&byte) => (byte == text[t]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            // Let the last `*` cover one more byte and try again from there.
            (None, Some((after_star, covered))) => {
                star = Some((after_star, covered + 1));
                p = after_star;
                t = covered + 1;
            }
            (None, None) => return false,
        }
    }
    pattern[p..].iter().all(|&byte| byte == b'*')
}

/// Matches `byte` against the class that opens at `pattern[open]` (`[`): the position after
/// the class when it matches. An unclosed class runs to the end of the pattern.
fn class(pattern: &[u8], open: usize, byte: u8) -> Option<usize> {
    let mut i = open + 1;
    let negated = matches!(pattern.get(i), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            matched |= pattern[i + 1] == byte;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (low, high) = (
                pattern[i].min(pattern[i + 2]),
                pattern[i].max(pattern[i + 2]),
            );
            matched |= (low..=high).contains(&byte);
            i += 3;
        } else {
            matched |= pattern[i] == byte;
            i += 1;
        }
    }
    (matched != negated).then_some((i + 1).min(pattern.len()))
}

#[cfg(test)]
mod tests {
    use super::glob_matches;

    fn matches(pattern: &str, text: &str) -> bool {
        glob_matches(pattern.as_bytes(), text.as_bytes())
    }

    #[test]
    fn globs_read_as_redis_reads_them() {
        assert!(matches("*", ""));
        assert!(matches("*", "anything"));
        assert!(matches("orders:*", "orders:42"));
        assert!(!matches("orders:*", "order:42"));
        assert!(matches("*:42", "orders:42"));
        assert!(matches("o*s:*2", "orders:42"));
        assert!(!matches("o*s:*3", "orders:42"));
        assert!(matches("job-?", "job-7"));
        assert!(!matches("job-?", "job-77"));
        assert!(matches("job-[0-9]", "job-7"));
        assert!(!matches("job-[!0-9]", "job-7"));
        assert!(matches("job-[^a-c]", "job-d"));
        assert!(matches("job-[abc]", "job-b"));
        assert!(!matches("job-[abc]", "job-d"));
        assert!(matches(r"a\*b", "a*b"));
        assert!(!matches(r"a\*b", "axb"));
        assert!(matches("**x", "abx"));
        assert!(!matches("", "a"));
        assert!(matches("", ""));
    }
}
