//! Who holds a lock: the holder half of the owner field.
//!
//! On the server a holder is written as `<client id>:<holder id>`, where the client id is a UUID
//! made per backend instance and the holder id is a decimal integer. Redisson uses the JVM thread
//! id there; in async Rust a task moves between threads, so the default holder is the current
//! **tokio task**, and an explicit [`Owner`] can be made for anything else (a request, a job, a
//! group of tasks that should share reentrancy).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// Explicit owners count up from here, far above any tokio task id (task ids count up from 1),
/// so the two kinds of holder ids never meet on the server.
const EXPLICIT_OWNER_BASE: u64 = 1 << 62;

/// The longest `:<holder id>` after the client id: a colon and the 20 digits of `u64::MAX`.
pub(crate) const MAX_HOLDER_SUFFIX_LEN: usize = 21;

static NEXT_EXPLICIT_OWNER: AtomicU64 = AtomicU64::new(EXPLICIT_OWNER_BASE);

thread_local! {
    // Code outside any tokio task (for example inside `Runtime::block_on`) gets one owner per OS
    // thread, which is what Redisson would do.
    static THREAD_OWNER: Owner = Owner::new();
}

/// The holder of a lock, for reentrancy: the same owner locking the same name again re-enters
/// (the hold count goes up); a different owner waits.
///
/// A guard carries its owner, so a guard released from another task or thread releases the right
/// hold.
///
/// # Example
///
/// ```
/// use lock_core::Owner;
///
/// let job = Owner::new();
/// let same_job = job.clone();
/// assert_eq!(job, same_job);
/// assert_ne!(job, Owner::new());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    holder: u64,
}

impl Owner {
    /// A new owner, distinct from every task and every other `Owner::new()` in this process.
    #[must_use]
    pub fn new() -> Owner {
        Owner {
            holder: NEXT_EXPLICIT_OWNER.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The owner that `lock(name)` uses: the current tokio task, or the current OS thread when
    /// called outside any task (the body of `#[tokio::main]` or `Runtime::block_on` is not a
    /// task: it runs on, and is owned by, the calling thread).
    ///
    /// Tokio task ids come from a process-wide counter, so a finished task's id is not handed to
    /// a new task in practice; still, a guard that outlives its task is best released explicitly.
    #[must_use]
    pub fn current() -> Owner {
        match tokio::task::try_id() {
            Some(id) => Owner {
                holder: task_number(id),
            },
            None => THREAD_OWNER.with(|owner| *owner),
        }
    }

    /// Builds an owner from a holder id, to act for a holder known by number (for example to
    /// release a lock left by a holder that crashed, or to share a lock with a Java service).
    #[must_use]
    pub fn from_holder_id(holder: u64) -> Owner {
        Owner { holder }
    }

    /// The holder id written after the client id in the owner field.
    #[must_use]
    pub fn holder_id(&self) -> u64 {
        self.holder
    }

    /// The owner field as stored on the server: `<client id>:<holder id>`.
    #[must_use]
    pub fn field(&self, client_id: &str) -> String {
        let mut field = String::with_capacity(client_id.len() + MAX_HOLDER_SUFFIX_LEN);
        self.write_field(client_id, &mut field);
        field
    }

    /// Appends the owner field to `out`, so it can share a buffer with the lock name.
    pub(crate) fn write_field(&self, client_id: &str, out: &mut String) {
        out.push_str(client_id);
        out.push(':');
        push_decimal(out, self.holder);
    }
}

/// A fresh client id for a backend instance: a UUID v4, as Redisson uses, so owner fields of
/// different processes and machines never collide.
///
/// # Example
///
/// ```
/// let id = lock_core::new_client_id();
/// assert_eq!(id.len(), 36);
/// assert_ne!(id, lock_core::new_client_id());
/// ```
#[must_use]
pub fn new_client_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl Default for Owner {
    fn default() -> Self {
        Owner::new()
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.holder)
    }
}

/// Appends `number` in decimal. Every `lock()` writes an owner field, where `write!` cost a few
/// hundred instructions of formatting machinery for one integer.
fn push_decimal(out: &mut String, mut number: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (number % 10) as u8;
        number /= 10;
        if number == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[start..]).expect("ASCII digits"));
}

/// The number of a tokio task id. Tokio exposes it only through `Hash` (one `u64` written) and
/// `Display` (its decimal digits); the hash is read first because it costs no formatting on the
/// hot path of every `lock()`, and the digits are the fallback should the hash ever write
/// anything else.
fn task_number(id: tokio::task::Id) -> u64 {
    /// Keeps the one `u64` a hash writes, and notices anything else.
    #[derive(Default)]
    struct Capture {
        number: Option<u64>,
        other: bool,
    }
    impl Hasher for Capture {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, _: &[u8]) {
            self.other = true;
        }
        fn write_u64(&mut self, number: u64) {
            if self.number.replace(number).is_some() {
                self.other = true;
            }
        }
    }
    let mut capture = Capture::default();
    id.hash(&mut capture);
    match capture.number {
        Some(number) if !capture.other => number,
        _ => id
            .to_string()
            .parse()
            .unwrap_or_else(|_| Owner::new().holder),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn current_is_stable_within_a_task_and_differs_across_tasks() {
        let in_task = || async {
            let owner = Owner::current();
            tokio::task::yield_now().await;
            assert_eq!(owner, Owner::current());
            owner
        };
        let here = tokio::spawn(in_task()).await.unwrap();
        let there = tokio::spawn(in_task()).await.unwrap();
        assert_ne!(here, there);
        assert!(
            here.holder_id() < EXPLICIT_OWNER_BASE,
            "a task id, not an explicit owner"
        );
        // The future driven by `block_on` is not a task: it is owned by its thread.
        assert!(Owner::current().holder_id() >= EXPLICIT_OWNER_BASE);
    }

    #[test]
    fn decimals_are_written_like_display() {
        for number in [0, 7, 10, 99, 1_000_001, u64::from(u32::MAX) + 1, u64::MAX] {
            let mut out = String::from("x");
            push_decimal(&mut out, number);
            assert_eq!(out, format!("x{number}"));
        }
    }

    #[tokio::test]
    async fn a_task_number_is_the_number_its_id_displays() {
        for _ in 0..3 {
            let id = tokio::spawn(async { tokio::task::id() }).await.unwrap();
            assert_eq!(task_number(id), id.to_string().parse::<u64>().unwrap());
        }
    }

    #[test]
    fn outside_a_task_the_thread_is_the_owner() {
        let here = Owner::current();
        assert_eq!(here, Owner::current());
        let other = std::thread::spawn(Owner::current).join().unwrap();
        assert_ne!(here, other);
    }

    #[test]
    fn field_layout_is_client_colon_holder() {
        let owner = Owner::from_holder_id(42);
        assert_eq!(owner.field("c0ffee"), "c0ffee:42");
    }
}
