//! The lock conformance suite against a real PostgreSQL server (one per test binary, shared by
//! its cases: every case uses fresh names), with `LISTEN`/`NOTIFY` wake-ups, and again with
//! waiters that poll.

mod common;

use common::Postgres;

mod listen {
    use super::*;
    lock_testkit::conformance_tests!(Postgres::listening());
}

mod poll {
    use super::*;
    lock_testkit::conformance_tests!(Postgres::polling());
}
