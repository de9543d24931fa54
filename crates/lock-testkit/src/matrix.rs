//! Every conformance suite over one deployment, as one invocation: the matrix's rows are the
//! deployments a test file sets up (memory, one server per notification mode, Sentinel, ...),
//! its columns the suites, and [`family_conformance_tests!`](crate::family_conformance_tests)
//! writes the columns out once for every row.

/// Generates a module per suite, each with one `#[test]` per case, for a harness expression
/// whose backend implements the whole lock family (`LockBackend`, `SemaphoreBackend`,
/// `LatchBackend`, `PermitBackend`, `ReadWriteBackend`, `FairBackend`,
/// `ElectionBackend`): the lock suite (`lock`), each primitive's suite (`semaphore`, `latch`,
/// `permits`, `rwlock`, `fair`, `election`), and the lock suite again on the write side and
/// on the fair side (`write_side`, `fair_side`), which are exclusive locks themselves.
///
/// Expand it inside a module of its own per deployment; the expression is evaluated once per
/// test, inside that test's runtime, and may name anything of the enclosing module.
///
/// ```
/// use lock_core::MemoryBackend;
/// use lock_testkit::conformance::Harness;
///
/// struct Memory(MemoryBackend);
///
/// impl Harness for Memory {
///     type Backend = MemoryBackend;
///     async fn client(&self) -> MemoryBackend {
///         self.0.new_client()
///     }
/// }
///
/// mod memory {
///     use super::*;
///     lock_testkit::family_conformance_tests!(Memory(MemoryBackend::new()));
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! family_conformance_tests {
    ($harness:expr) => {
        mod lock {
            use super::*;
            $crate::conformance_tests!($harness);
        }
        mod semaphore {
            use super::*;
            $crate::semaphore_conformance_tests!($harness);
        }
        mod latch {
            use super::*;
            $crate::latch_conformance_tests!($harness);
        }
        mod permits {
            use super::*;
            $crate::permit_conformance_tests!($harness);
        }
        mod rwlock {
            use super::*;
            $crate::rw_conformance_tests!($harness);
        }
        /// The write side alone is an exclusive lock: the whole lock suite holds for it.
        mod write_side {
            use super::*;
            $crate::conformance_tests!($crate::rw_conformance::WriteSide($harness));
        }
        mod fair {
            use super::*;
            $crate::fair_conformance_tests!($harness);
        }
        /// The fair side is an exclusive reentrant lock: the whole lock suite holds for it.
        mod fair_side {
            use super::*;
            $crate::conformance_tests!($crate::fair_conformance::FairSide($harness));
        }
        mod election {
            use super::*;
            $crate::election_conformance_tests!($harness);
        }
    };
}
