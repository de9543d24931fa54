//! The lockers a [`crate::Locker`] makes for its other primitives (the fair lock's side, the
//! read-write lock's two sides, the permits' side, the election's side), each made on first use
//! and then shared by every clone of the locker and every handle it gave out.
//!
//! Sharing them is what makes `locker.fair("a")` and a later `locker.fair("a")` one lock
//! client: one watchdog renewing both handles' holds, one order book putting one owner's calls
//! on one name in line (a guard dropped just before the next lock has its release run first).
//! A handle made from a fresh locker each time would lose both.
//!
//! The map is keyed by type because [`crate::Locker`] is generic over any backend while each
//! family's locker type depends on the backend's associated types (`B::Fair`, `B::Read`, ...),
//! which only exist where the backend implements that family's contract.

use std::any::{Any, TypeId};
use std::sync::Mutex;

/// Each family's shared state, by its type; made on first use.
#[derive(Default)]
pub(crate) struct Families {
    made: Mutex<Vec<(TypeId, Box<dyn Any + Send + Sync>)>>,
}

impl Families {
    /// The family of type `F` of this locker: the one made earlier, or the one `make` makes now
    /// (while no other call can make it too).
    pub fn get_or_make<F: Clone + Send + Sync + 'static>(&self, make: impl FnOnce() -> F) -> F {
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = TypeId::of::<F>();
        if let Some((_, family)) = made.iter().find(|(made_key, _)| *made_key == key) {
            return family
                .downcast_ref::<F>()
                .expect("a family is stored under its own type")
                .clone();
        }
        let family = make();
        made.push((key, Box::new(family.clone())));
        family
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_made_once_and_then_shared() {
        let families = Families::default();
        let first = families.get_or_make(|| std::sync::Arc::new(1_u8));
        let second = families.get_or_make(|| std::sync::Arc::new(2_u8));
        assert!(std::sync::Arc::ptr_eq(&first, &second));
        // Another type is another family.
        let other = families.get_or_make(|| std::sync::Arc::new(3_u16));
        assert_eq!(*other, 3);
    }

    use crate::error::Error;
    use crate::locker::Locker;
    use crate::memory::MemoryBackend;

    /// Every entry point checks the name before anything is sent.
    #[test]
    fn every_entry_point_refuses_a_bad_name() {
        let locker = Locker::new(MemoryBackend::new());
        let too_long = "x".repeat(crate::options::MAX_NAME_LEN + 1);
        for bad in ["", too_long.as_str()] {
            assert!(matches!(locker.fair(bad), Err(Error::InvalidName { .. })));
            assert!(matches!(
                locker.read_write(bad),
                Err(Error::InvalidName { .. })
            ));
            assert!(matches!(
                locker.permits(bad),
                Err(Error::InvalidName { .. })
            ));
            assert!(matches!(
                locker.semaphore(bad),
                Err(Error::InvalidName { .. })
            ));
            assert!(matches!(locker.latch(bad), Err(Error::InvalidName { .. })));
            assert!(matches!(
                locker.election(bad),
                Err(Error::InvalidName { .. })
            ));
        }
    }

    /// Two handles on one name, from a locker and its clone, are one client: a guard dropped
    /// through the first has its release run before the same task's lock through the second,
    /// which is then a new hold, not a re-entry into the hold being released.
    #[tokio::test(flavor = "current_thread")]
    async fn handles_from_one_locker_share_one_line_per_owner() {
        let locker = Locker::new(MemoryBackend::new());
        let first = locker.fair("shared-line").expect("name");
        let second = locker.clone().fair("shared-line").expect("name");
        for _ in 0..3 {
            drop(first.lock().await.expect("lock"));
            let again = second.lock().await.expect("lock again");
            assert_eq!(again.hold_count(), 1, "re-entered a hold being released");
            drop(again);
        }
        let rw = locker.read_write("shared-rw").expect("name");
        let other = locker.clone().read_write("shared-rw").expect("name");
        drop(rw.write().await.expect("write"));
        let reading = other.read().await.expect("read after the write's release");
        assert_eq!(reading.hold_count(), 1);
        drop(reading);
        // The read's release runs before the write: no upgrade refused.
        let writing = rw.write().await.expect("write after the read's release");
        assert!(writing.release().await.expect("release").was_held());
    }
}
