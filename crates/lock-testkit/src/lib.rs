//! Test support for distlock: real `redis-server` processes and the backend conformance suite.
//!
//! - [`RedisServer`]: a real server on a free loopback port in a temp dir, with fault controls
//!   (pause, resume, kill, restart), stopped by pid on drop.
//! - [`conformance`]: the behaviour every backend must show, as async functions plus the
//!   [`conformance_tests!`] macro that turns them into one test each.

pub mod conformance;
pub mod server;

pub use server::{RedisServer, ServerError, ServerOptions};
