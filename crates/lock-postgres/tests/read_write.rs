//! The read-write lock conformance suite against a real PostgreSQL server (one per test binary,
//! shared by its cases: every case uses fresh names), with `LISTEN`/`NOTIFY` wake-ups; and the
//! lock conformance suite on the write side alone (an exclusive, reentrant lock like any other).

mod common;

lock_testkit::rw_conformance_tests!(common::Postgres::listening());

mod write_side {
    use super::common;

    lock_testkit::conformance_tests!(lock_testkit::rw_conformance::WriteSide(
        common::Postgres::listening()
    ));
}
