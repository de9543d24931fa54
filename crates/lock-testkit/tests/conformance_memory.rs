//! Every conformance suite against the in-memory backend.

use lock_core::MemoryBackend;
use lock_testkit::conformance::Harness;

struct Memory(MemoryBackend);

impl Harness for Memory {
    type Backend = MemoryBackend;

    async fn client(&self) -> MemoryBackend {
        self.0.new_client()
    }
}

lock_testkit::family_conformance_tests!(Memory(MemoryBackend::new()));
