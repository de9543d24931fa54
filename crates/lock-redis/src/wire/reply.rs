//! Reading replies: the echoed request id, the acquire scripts' answers, times, hold counts,
//! and the errors of replies that cannot be trusted.

use std::time::Duration;

use lock_core::{AcquireOutcome, Error, Grant, ReleaseOutcome, Result};
use redis::Value;

/// Reads an acquire script's reply (after the request id): `[1, hold count, token]` when
/// granted, `[0, pttl]` when held by someone else.
pub(crate) fn acquire_outcome(reply: &[i64], fencing: bool) -> Result<AcquireOutcome> {
    match reply {
        [1, hold_count, token] => Ok(AcquireOutcome::Acquired(Grant {
            hold_count: count(*hold_count)?,
            fencing_token: fencing.then(|| u64::try_from(*token).unwrap_or(0)),
        })),
        [0, pttl] => Ok(AcquireOutcome::Held {
            ttl: ttl_from_pttl(*pttl),
        }),
        other => Err(Error::Protocol(
            format!("acquire script answered {other:?}").into(),
        )),
    }
}

/// Reads a release script's answer: `-1` (the owner held nothing), `0` (its last hold went) or
/// the holds it has left.
pub(crate) fn release_outcome(left: i64) -> Result<ReleaseOutcome> {
    Ok(match left {
        -1 => ReleaseOutcome::NotHeld,
        0 => ReleaseOutcome::Released,
        left => ReleaseOutcome::StillHeld {
            hold_count: count(left)?,
        },
    })
}

/// Holders and their hold counts, in order.
pub(crate) type Holders = Vec<(String, u32)>;

/// Reads a lock hash read whole (`HGETALL`: field, hold count, ...) and its `PTTL`: the
/// holders in order, and the lease left while anyone holds it.
pub(crate) fn holders(flat: &[String], pttl: i64) -> Result<(Holders, Option<Duration>)> {
    let mut holders = Vec::with_capacity(flat.len() / 2);
    for pair in flat.chunks_exact(2) {
        let held: u32 = pair[1].parse().map_err(|_| {
            Error::Protocol(format!("hold count {:?} is not a number", pair[1]).into())
        })?;
        holders.push((pair[0].clone(), held));
    }
    holders.sort();
    let ttl = if holders.is_empty() {
        None
    } else {
        ttl_from_pttl(pttl)
    };
    Ok((holders, ttl))
}

/// Whether a script reply's first item is the request id `nonce`.
pub(crate) fn echoes(first: Option<&Value>, nonce: u64) -> bool {
    match first {
        Some(Value::BulkString(bytes)) => is_decimal_of(bytes, nonce),
        _ => false,
    }
}

/// Whether `replies` are the `count` replies of a pipeline's commands followed by the echo of
/// request id `nonce` (a `PING <nonce>` or the one-line echo script added after them).
pub(crate) fn ends_with_echo(replies: &[Value], count: usize, nonce: u64) -> bool {
    replies.len() == count + 1 && echoes(replies.last(), nonce)
}

/// Whether `bytes` are exactly the decimal digits of `n` (no sign, no leading zero): compared
/// digit by digit from the end, which costs a fraction of parsing (every call checks one).
pub(crate) fn is_decimal_of(bytes: &[u8], mut n: u64) -> bool {
    let mut at = bytes.len();
    loop {
        let Some(last) = at.checked_sub(1) else {
            return false;
        };
        at = last;
        // `n % 10` is a single digit.
        #[allow(clippy::cast_possible_truncation)]
        let digit = b'0' + (n % 10) as u8;
        if bytes[at] != digit {
            return false;
        }
        n /= 10;
        if n == 0 {
            return at == 0;
        }
    }
}

/// The error of a call whose error reply cannot be attributed: the check `PING` was refused
/// with another error. Ambiguous, since the call may have run; the connection is kept.
pub(crate) fn unattributable(refusal: &redis::ServerError) -> Error {
    Error::ConnectionLost(
        format!("an error reply could not be attributed (the check PING was refused: {refusal:?})")
            .into(),
    )
}

/// The error of a call whose reply cannot be told apart from another request's: it may or may
/// not have run (ambiguous), and the connection is being replaced.
pub(crate) fn out_of_step() -> Error {
    Error::ConnectionLost(
        "a reply was out of step with its request (a reply went missing); the command \
         connection is being replaced"
            .into(),
    )
}

/// A duration as the whole milliseconds the scripts and `PX` take.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A `PTTL` answer as a time to live: `None` for -1 (no expiry) and -2 (no key).
pub(crate) fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A hold count read from a script.
pub(crate) fn count(value: i64) -> Result<u32> {
    u32::try_from(value)
        .map_err(|_| Error::Protocol(format!("hold count {value} out of range").into()))
}

/// A starting point for a connection's request ids: below 2^32, so an id is at most ten
/// digits for its first few billion requests. Every request formats it, sends it, and has it
/// echoed and compared digit by digit; the full 62 bits of [`rand_start`] cost nineteen.
pub(crate) fn request_id_start() -> u64 {
    // Only ids of requests still in flight on the same connection must differ (see
    // [`rand_start`]); the clock's low bits still start each backend elsewhere.
    rand_start() & (u64::from(u32::MAX))
}

/// A starting point for request ids (and the probe's random tags).
pub(crate) fn rand_start() -> u64 {
    // The id only has to differ from the ids of requests still in flight on the same
    // connection; a clock-based start keeps sequences of different backends apart as well.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    #[allow(clippy::cast_possible_truncation)] // only the low bits matter
    let start = nanos as u64;
    start & ((1 << 62) - 1)
}

#[cfg(test)]
mod decimal_tests {
    use super::*;

    #[test]
    fn an_echo_is_exactly_the_decimal_digits_of_the_id() {
        let echo = |text: &str, nonce| echoes(Some(&Value::BulkString(text.into())), nonce);
        assert!(echo("0", 0));
        assert!(echo("7", 7));
        assert!(echo("4611686018427387903", (1 << 62) - 1));
        assert!(echo("18446744073709551615", u64::MAX));
        assert!(!echo("", 0));
        assert!(!echo("07", 7));
        assert!(!echo("17", 7));
        assert!(!echo("8", 7));
        assert!(!echo("-7", 7));
        assert!(!echo("1844674407370955161", u64::MAX));
        assert!(!echo("118446744073709551615", u64::MAX));
        assert!(!echo("12 ", 12));
        assert!(!echoes(Some(&Value::Int(7)), 7));
        assert!(!echoes(None, 7));
    }
}
