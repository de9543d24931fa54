//! The same fixtures with their servers in containers (feature `testcontainers`, off by
//! default), for integration tests against exact server images.
//!
//! **Process-based servers are the default**: [`RedisServer`](crate::RedisServer) runs the `redis-server` (or
//! `valkey-server`) found on the machine, needs no container engine, starts in milliseconds and
//! has every fault control. With [`ServerOptions::container`](crate::ServerOptions::container) the same fixtures run their
//! servers in containers of an image instead: [`RedisServer::start_with`](crate::RedisServer::start_with) for one server,
//! [`RedisCluster::start_with`](crate::RedisCluster::start_with) for a cluster whose every node
//! is a container (formed, failed over and resharded by the same code as a cluster of
//! processes), [`RedisNodes::start_with`](crate::RedisNodes::start_with) for independent nodes.
//!
//! # The seam
//!
//! A fixture node is always a [`RedisServer`](crate::RedisServer); only its launch differs. Its options become the
//! server's command line (`--port P --bind 127.0.0.1 --save "" ...`, plus `--cluster-enabled
//! yes --cluster-port B --cluster-config-file nodes.conf` and the fixture's own directives for
//! a cluster node) instead of a configuration file, and `docker run` starts it instead of a
//! process spawn. Everything the fixtures say to a server goes over its port, so a cluster in
//! containers is formed, failed over (`CLUSTER FAILOVER`) and resharded (`SETSLOT`, `MIGRATE`)
//! as a cluster of processes is.
//!
//! # Loopback only: the host network
//!
//! Every container runs on the host network (`--network host`), its server bound to
//! `127.0.0.1` on a free port the testkit chose, as a process would be; no port is mapped and
//! no bridge address is ever contacted. The engine needs no bridge network at all
//! (`dockerd --bridge=none --iptables=false` is enough), and cluster nodes announce
//! `127.0.0.1`, the address their peers and the tests reach them on. Host networking needs a
//! Linux engine (Docker Desktop's VM has its own loopback).
//!
//! # The image
//!
//! The tests take the image from [`IMAGE_ENV`] (`DISTLOCK_REDIS_IMAGE`); any image whose
//! entrypoint runs the server with the arguments it is given works, such as the official
//! `redis:7.4` or `valkey/valkey:8`. The image must be in the engine already: nothing is
//! pulled (`docker run --pull never`; tests contact loopback addresses only). Bring one in with
//! `docker load -i redis-7.4.tar` (a file `docker save redis:7.4` wrote on a machine that can
//! pull), or let `scripts/ensure-docker.sh` build [`LOCAL_IMAGE`] with `docker import` from a
//! root filesystem holding the machine's `redis-server` and the libraries `ldd` lists:
//!
//! ```text
//! scripts/ensure-docker.sh          # engine + local image, runs the container tests, stops
//! docker load -i redis-7.4.tar      # an image saved elsewhere, then:
//! DISTLOCK_REDIS_IMAGE=redis:7.4 cargo test -p lock-testkit --all-features --test containers
//! ```
//!
//! The script uses an engine that answers, or installs Debian's `docker.io` and starts `dockerd`
//! (as root) with its own data root, socket and pid file, without a bridge network, and stops
//! it by the pid in its pid file at the end; when that cannot be done, or a server from the
//! image does not answer `PING` on `127.0.0.1`, it prints why the container variant is
//! skipped. The tests skip (with a line on stderr) when [`image_or_skip`] says so, unless
//! [`REQUIRED_ENV`] is set (the script sets it once the engine has proven to work): then they
//! fail. Every `docker` command runs under a deadline: a wedged engine fails a test with
//! [`ServerError::ContainerTimeout`].
//!
//! # What a server in a container cannot do
//!
//! The fault controls that act on the server's process, [`pause`](crate::RedisServer::pause),
//! [`resume`](crate::RedisServer::resume), [`kill`](crate::RedisServer::kill), [`stop`](crate::RedisServer::stop)
//! and [`restart`](crate::RedisServer::restart) (and the [`RedisNodes`](crate::RedisNodes) ones built
//! on them), return [`ServerError::Unsupported`]: the process is not the test's own, and
//! [`pid`](crate::RedisServer::pid) is `None`. So a cluster in containers fails over with
//! [`FailoverMode`](crate::FailoverMode)s that need no dead node, not by killing a primary.
//! Faults sent as commands ([`kill_normal_clients`](crate::RedisServer::kill_normal_clients),
//! [`script_flush`](crate::RedisServer::script_flush)...) work. A Sentinel cannot run in a container;
//! [`RedisServer::log_tail`](crate::RedisServer::log_tail) reads the container's log, and
//! [`binary`](crate::RedisServer::binary) is `docker`.
//!
//! Each container is removed (`docker rm --force`, by its id) when its [`RedisServer`](crate::RedisServer) is
//! dropped. A test process killed outright leaves its containers behind; they carry the label
//! [`LABEL`]`=<pid>` so they can be found and removed by id
//! (`docker ps --all --quiet --filter label=distlock.testkit.pid`).
//!
//! The `docker` command drives the engine, not the `testcontainers` crate whose name the
//! feature keeps: that crate's 0.28 speaks only Docker API 1.53 and Debian bookworm's engine
//! (20.10) refuses anything newer than 1.41; the command negotiates.

use crate::server::ServerError;
use crate::server::container;

pub use crate::server::container::LABEL;

/// The environment variable naming the image the container tests run (`name[:tag]`).
pub const IMAGE_ENV: &str = "DISTLOCK_REDIS_IMAGE";

/// The image `scripts/ensure-docker.sh` builds from the machine's own `redis-server`.
pub const LOCAL_IMAGE: &str = "distlock-redis:local";

/// The environment variable that turns [`image_or_skip`]'s skip into a failure (any value but
/// empty or `0`): `scripts/ensure-docker.sh` sets it to `1` once a server from the image has
/// answered on its engine, so from then on a container test that cannot run is an error.
pub const REQUIRED_ENV: &str = "DISTLOCK_CONTAINERS_REQUIRED";

/// The image named by [`IMAGE_ENV`], if set and not empty.
pub fn image_from_env() -> Option<String> {
    std::env::var(IMAGE_ENV)
        .ok()
        .filter(|image| !image.is_empty())
}

/// The version of the container engine the `docker` command reaches.
///
/// # Errors
///
/// [`ServerError::Container`] with the command's words when there is no `docker` command or no
/// engine answers it; [`ServerError::ContainerTimeout`] when the engine does not answer within
/// 20 s.
pub fn engine_version() -> Result<String, ServerError> {
    container::engine_version()
}

/// The image a container test should run, or `None` after printing (on stderr) why `test` is
/// skipped: [`IMAGE_ENV`] unset, or no container engine answering.
///
/// When [`REQUIRED_ENV`] is set (to anything but `0`), as `scripts/ensure-docker.sh` does once
/// it has seen a server from the image answer, there is no skipping: a test that would skip
/// fails instead, so a dead engine is noticed.
///
/// ```no_run
/// use lock_testkit::containers::image_or_skip;
/// use lock_testkit::{RedisServer, ServerOptions};
///
/// let Some(image) = image_or_skip("my_container_test") else {
///     return Ok(());
/// };
/// let server = RedisServer::start_with(ServerOptions::new().container(image))?;
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
///
/// # Panics
///
/// When [`REQUIRED_ENV`] is set and the test would be skipped (the panic fails the test).
pub fn image_or_skip(test: &str) -> Option<String> {
    match decide(test, image_from_env(), required(), engine_version) {
        Ok(image) => image,
        Err(why) => panic!("{why}"),
    }
}

/// Whether [`REQUIRED_ENV`] asks the container tests to fail rather than skip.
fn required() -> bool {
    std::env::var(REQUIRED_ENV).is_ok_and(|value| !value.is_empty() && value != "0")
}

/// [`image_or_skip`]'s decision: the image, `None` after saying why on stderr, or (`required`)
/// why the test fails.
fn decide(
    test: &str,
    image: Option<String>,
    required: bool,
    engine: impl FnOnce() -> Result<String, ServerError>,
) -> Result<Option<String>, String> {
    let why = match image {
        None => format!(
            "{IMAGE_ENV} is not set (scripts/ensure-docker.sh starts an engine, builds \
             {LOCAL_IMAGE} and runs the container tests)"
        ),
        Some(image) => match engine() {
            Ok(_) => return Ok(Some(image)),
            Err(err) => format!("no container engine answers ({err})"),
        },
    };
    if required {
        return Err(format!(
            "{test} cannot run, and {REQUIRED_ENV} says it must: {why}"
        ));
    }
    eprintln!("skipping {test}: {why}");
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_up() -> Result<String, ServerError> {
        Ok("20.10.24".to_owned())
    }

    fn engine_down() -> Result<String, ServerError> {
        Err(ServerError::Container(
            "Cannot connect to the Docker daemon".to_owned(),
        ))
    }

    #[test]
    fn a_test_skips_unless_required() {
        let image = || Some("redis:7.4".to_owned());
        assert_eq!(decide("t", image(), false, engine_up), Ok(image()));
        assert_eq!(decide("t", image(), true, engine_up), Ok(image()));
        assert_eq!(decide("t", None, false, engine_up), Ok(None));
        assert_eq!(decide("t", image(), false, engine_down), Ok(None));
        // Required: a dead engine or no image fails the test, with the reason.
        let dead = decide("t", image(), true, engine_down).unwrap_err();
        assert!(
            dead.contains(REQUIRED_ENV) && dead.contains("Cannot connect"),
            "{dead}"
        );
        let unset = decide("t", None, true, engine_up).unwrap_err();
        assert!(unset.contains(IMAGE_ENV), "{unset}");
    }
}
