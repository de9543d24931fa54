//! A server in a container (feature `testcontainers`), run and removed through the `docker`
//! command, on the host network.
//!
//! Why the `docker` command and not the `testcontainers` crate: testcontainers 0.28 (through
//! bollard 0.21) sends every request for Docker API 1.53 and never negotiates, while Debian
//! bookworm's engine (`docker.io` 20.10, the one our machines install) answers at most API 1.41
//! and refuses every request ("client version 1.53 is too new"). The command negotiates the API
//! version, finds the engine the usual way (`DOCKER_HOST`, the current context), and is
//! synchronous like the rest of the server fixtures (no async runtime to create or to drop a
//! container in).
//!
//! Why the host network: the server must be reachable on `127.0.0.1` only (tests never contact
//! another address, and a cluster node announces the address its peers reach it on), and the
//! engine may run without a bridge network at all (`dockerd --bridge=none`). The testkit picks
//! the free port, the server binds `127.0.0.1` on it; no port is mapped.

use std::io;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::error::ServerError;
use super::info::field;
use super::launch::LaunchError;
use super::probe::server_info;

/// The label every container of the testkit carries, with the test process's pid as value, so
/// containers left by a test process that died can be found (`docker ps --filter label=...`).
pub const LABEL: &str = "distlock.testkit.pid";
/// What Redis and Valkey log once they listen (`Ready to accept connections tcp` in 7.x).
const READY_LINE: &str = "Ready to accept connections";
/// What the server logs when its port (or cluster bus port) is taken.
const ADDR_IN_USE: &str = "Address already in use";
/// How long a started container may take to answer (after `docker run` has returned, so an
/// image pull is not included).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of container log shown in errors.
const LOG_TAIL_LINES: usize = 40;

/// A container started by this process, removed (`docker rm --force`, by id) on drop.
#[derive(Debug)]
pub(super) struct Container {
    id: String,
    image: String,
}

impl Container {
    /// The container id, as `docker run` printed it.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// The image the container runs.
    pub(super) fn image(&self) -> &str {
        &self.image
    }

    /// The container's output (stdout, then stderr); empty if it cannot be read.
    pub(super) fn logs(&self) -> String {
        match docker_output(&["logs", &self.id]) {
            Ok(output) => {
                let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&output.stderr));
                text
            }
            Err(_) => String::new(),
        }
    }

    /// The last `max_lines` lines of [`logs`](Self::logs).
    pub(super) fn log_tail(&self, max_lines: usize) -> String {
        last_lines(&self.logs(), max_lines)
    }

    /// Whether the engine says the container runs.
    pub(super) fn is_running(&self) -> Result<bool, ServerError> {
        let state = docker(&["inspect", "--format", "{{.State.Running}}", &self.id])?;
        Ok(state.trim() == "true")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // By id: only this container, whatever else runs on the engine.
        let _ = docker_output(&["rm", "--force", "--volumes", &self.id]);
    }
}

/// Runs `docker args...`; its stdout on success, its stderr as [`ServerError::Container`] on
/// failure.
pub(super) fn docker(args: &[&str]) -> Result<String, ServerError> {
    let output = docker_output(args).map_err(|err| {
        ServerError::Container(format!(
            "cannot run the `docker` command ({err}); install Docker, or run \
             scripts/ensure-docker.sh, which starts an engine and builds a local image"
        ))
    })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(ServerError::Container(format!(
            "`docker {}` failed ({}): {}",
            args.first().copied().unwrap_or_default(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

fn docker_output(args: &[&str]) -> io::Result<Output> {
    Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
}

/// The engine's version, when an engine answers the `docker` command.
///
/// # Errors
///
/// [`ServerError::Container`] with the command's words when no engine answers.
pub(crate) fn engine_version() -> Result<String, ServerError> {
    Ok(docker(&["version", "--format", "{{.Server.Version}}"])?
        .trim()
        .to_owned())
}

/// Runs `image` with `args` on the host network and waits until the server in it answers on
/// `127.0.0.1:port`. Returns the container and the server's flavour and version
/// (`Redis server v=7.4.1`).
pub(super) fn launch(
    image: &str,
    args: &[String],
    port: u16,
    password: Option<&str>,
) -> Result<(Container, String), LaunchError> {
    let label = format!("{LABEL}={}", std::process::id());
    let mut run = vec![
        "run",
        "--detach",
        "--network",
        "host",
        "--label",
        &label,
        image,
    ];
    run.extend(args.iter().map(String::as_str));
    let id = docker(&run).map_err(LaunchError::Fatal)?.trim().to_owned();
    let container = Container {
        id,
        image: image.to_owned(),
    };
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut delay = Duration::from_millis(10);
    loop {
        // The ready line comes once the server listens, so a server answering the port after it
        // is this one: had the port been taken, this server would have exited instead.
        let logs = container.logs();
        let last = if logs.contains(READY_LINE) {
            match server_info(port, password) {
                Ok(info) => return Ok((container, version_of(&info))),
                Err(err) => err.to_string(),
            }
        } else if !container.is_running().map_err(LaunchError::Fatal)? {
            // Read again: the server may have written its last words since.
            let logs = container.logs();
            let err = ServerError::NotReady {
                port,
                reason: format!("the container {} exited", container.id),
                log_tail: last_lines(&logs, LOG_TAIL_LINES),
            };
            // The container is removed when it goes out of scope here.
            return Err(if logs.contains(ADDR_IN_USE) {
                LaunchError::PortInUse(err)
            } else {
                LaunchError::Fatal(err)
            });
        } else {
            "the server has not logged that it is ready yet".to_owned()
        };
        if Instant::now() >= deadline {
            return Err(LaunchError::Fatal(ServerError::NotReady {
                port,
                reason: format!(
                    "the container {} did not answer within {} s (last: {last})",
                    container.id,
                    READY_TIMEOUT.as_secs()
                ),
                log_tail: container.log_tail(LOG_TAIL_LINES),
            }));
        }
        thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(100));
    }
}

/// `Valkey server v=8.0.1` or `Redis server v=7.4.1`, from `INFO server`, in the words of
/// `redis-server --version`.
fn version_of(info: &str) -> String {
    match field(info, "valkey_version") {
        Some(version) => format!("Valkey server v={version}"),
        None => format!(
            "Redis server v={}",
            field(info, "redis_version").unwrap_or("unknown")
        ),
    }
}

fn last_lines(text: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_in_the_words_of_the_binary() {
        assert_eq!(
            version_of("# Server\r\nredis_version:7.4.1\r\nredis_mode:standalone\r\n"),
            "Redis server v=7.4.1"
        );
        assert_eq!(
            version_of("redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n"),
            "Valkey server v=8.0.1"
        );
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
    }
}
