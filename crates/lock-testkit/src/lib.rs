//! Test support for distlock: real `redis-server` processes and the backend conformance suite.
//!
//! - [`RedisServer`]: a real server on a free loopback port in a temp dir, with fault controls
//!   (pause, resume, kill, restart), stopped by pid on drop.
//! - [`RedisNodes`]: `n` independent real servers (no replication, no cluster) for tests of
//!   multi-node locks (RedLock, MultiLock), with the same fault controls per node.
//! - [`conformance`]: the behaviour every backend must show, as async functions plus the
//!   [`conformance_tests!`] macro that turns them into one test each.

pub mod conformance;
pub mod nodes;
pub mod server;

pub use nodes::RedisNodes;
pub use server::{RedisServer, ServerError, ServerOptions};
