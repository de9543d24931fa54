//! The semaphore and lease-bound permits conformance suites against a real PostgreSQL server
//! (one per test binary, shared by its cases: every case uses fresh names), with
//! `LISTEN`/`NOTIFY` wake-ups.

mod common;

lock_testkit::semaphore_conformance_tests!(common::Postgres::listening());
lock_testkit::permit_conformance_tests!(common::Postgres::listening());
