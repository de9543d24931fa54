//! The conformance suite against the in-memory backend.

use lock_core::MemoryBackend;
use lock_testkit::conformance::Harness;

struct Memory(MemoryBackend);

impl Harness for Memory {
    type Backend = MemoryBackend;

    async fn client(&self) -> MemoryBackend {
        self.0.new_client()
    }
}

lock_testkit::conformance_tests!(Memory(MemoryBackend::new()));

mod semaphore {
    use super::*;
    lock_testkit::semaphore_conformance_tests!(Memory(MemoryBackend::new()));
}

mod latch {
    use super::*;
    lock_testkit::latch_conformance_tests!(Memory(MemoryBackend::new()));
}

mod permits {
    use super::*;
    lock_testkit::permit_conformance_tests!(Memory(MemoryBackend::new()));
}

mod rwlock {
    use super::*;
    lock_testkit::rw_conformance_tests!(Memory(MemoryBackend::new()));
}

/// The write side alone is an exclusive lock: the whole lock suite holds for it.
mod write_side {
    use super::*;
    use lock_testkit::rw_conformance::WriteSide;
    lock_testkit::conformance_tests!(WriteSide(Memory(MemoryBackend::new())));
}

mod fair {
    use super::*;
    lock_testkit::fair_conformance_tests!(Memory(MemoryBackend::new()));
}

/// The fair side is an exclusive reentrant lock: the whole lock suite holds for it.
mod fair_side {
    use super::*;
    use lock_testkit::fair_conformance::FairSide;
    lock_testkit::conformance_tests!(FairSide(Memory(MemoryBackend::new())));
}

mod election {
    use super::*;
    lock_testkit::election_conformance_tests!(Memory(MemoryBackend::new()));
}
