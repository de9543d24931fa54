//! A fixture the tests of one test binary share while any of them runs.

use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A fixture (a cluster, a Sentinel group, a server) that the tests of one test binary share:
/// the first test that asks starts it, the others running meanwhile get the same one, and it
/// stops when the last test holding it ends (a later test starts a new one). Tests that run
/// side by side so share its start-up; nothing outlives the tests, since the servers are
/// stopped when the last handle drops.
///
/// The unit of sharing is the process: `cargo test` runs a binary's tests on threads of one
/// process, which is why `scripts/run-tests.py` runs whole binaries side by side rather than
/// each test in a process of its own.
///
/// # Example
///
/// ```no_run
/// use lock_testkit::{RedisCluster, SharedFixture};
///
/// static CLUSTER: SharedFixture<RedisCluster> = SharedFixture::new();
///
/// #[test]
/// fn uses_the_shared_cluster() {
///     let cluster = CLUSTER.get_or_start(|| RedisCluster::start(3, 1).expect("start a cluster"));
///     let _seeds = cluster.urls();
/// }
/// # fn main() {}
/// ```
pub struct SharedFixture<T> {
    slot: Mutex<Weak<T>>,
}

impl<T> SharedFixture<T> {
    /// An empty slot, for a `static`.
    pub const fn new() -> Self {
        SharedFixture {
            slot: Mutex::new(Weak::new()),
        }
    }

    /// The fixture some running test holds, or a new one from `start` when none does. A test
    /// that panicked while starting one leaves the slot usable for the next.
    pub fn get_or_start(&self, start: impl FnOnce() -> T) -> Arc<T> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(fixture) = slot.upgrade() {
            return fixture;
        }
        let fixture = Arc::new(start());
        *slot = Arc::downgrade(&fixture);
        fixture
    }
}

impl<T> Default for SharedFixture<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_fixture_while_held_and_a_new_one_after() {
        static FIXTURE: SharedFixture<u32> = SharedFixture::new();
        let mut starts = 0;
        let first = FIXTURE.get_or_start(|| {
            starts += 1;
            7
        });
        let second = FIXTURE.get_or_start(|| {
            starts += 1;
            8
        });
        assert!(Arc::ptr_eq(&first, &second), "shared while held");
        drop((first, second));
        let third = FIXTURE.get_or_start(|| {
            starts += 1;
            9
        });
        assert_eq!(
            (*third, starts),
            (9, 2),
            "started again once nobody held it"
        );
    }
}
