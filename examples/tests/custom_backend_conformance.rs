//! The `lock-testkit` conformance suite against the custom backend of `examples/src/custom_backend.rs`:
//! one test per case. Do the same for your own backend.

use distlock_examples::custom_backend::MapBackend;
use lock_testkit::conformance::Harness;

/// How the suite reaches the store under test: one store, a new client per call.
struct Map(MapBackend);

impl Harness for Map {
    type Backend = MapBackend;

    async fn client(&self) -> MapBackend {
        self.0.new_client()
    }
}

lock_testkit::conformance_tests!(Map(MapBackend::new()));
