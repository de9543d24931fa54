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
//!
//! Nothing is pulled (`docker run --pull never`): tests contact loopback addresses only, so the
//! image must be in the engine already (`docker load`, `docker import`, or
//! `scripts/ensure-docker.sh`'s local image). Every `docker` command runs under a deadline, so a
//! wedged engine fails the test ([`ServerError::ContainerTimeout`]) instead of hanging it.

use std::io::{self, Read};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::error::ServerError;
use super::info::field;
use super::launch::{LaunchError, last_lines};
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
/// How long one `docker` command (`run --detach`, `logs`, `inspect`, `rm`) may take before it
/// is killed: a wedged engine must fail the test, not hang it. Generous: `run` on a loaded
/// machine with the vfs storage driver copies the image.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `docker version` may take when asking whether an engine answers.
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);
/// How a [`ServerError::Container`] starts when the `docker` command cannot be run at all.
const CANNOT_RUN: &str = "cannot run the `docker` command";
/// Launches by this process, for container names no other launch has.
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

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
        self.read_logs().unwrap_or_default()
    }

    /// The container's output (stdout, then stderr).
    fn read_logs(&self) -> Result<String, ServerError> {
        let output = run(&["logs", &self.id], COMMAND_TIMEOUT)?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Ok(text)
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
        remove(&self.id);
    }
}

/// Removes container `name_or_id` (`docker rm --force`); says so on stderr when it may be left
/// behind (the engine refused or did not answer in time).
fn remove(name_or_id: &str) {
    match docker(&["rm", "--force", "--volumes", name_or_id]) {
        Ok(_) => {}
        // Nothing to remove, or no `docker` command at all (said already).
        Err(ServerError::Container(words))
            if words.contains("No such container") || words.starts_with(CANNOT_RUN) => {}
        Err(err) => eprintln!("lock-testkit: container {name_or_id} may be left behind: {err}"),
    }
}

/// Runs `docker args...` (at most [`COMMAND_TIMEOUT`]); its stdout on success, its stderr as
/// [`ServerError::Container`] on failure.
pub(super) fn docker(args: &[&str]) -> Result<String, ServerError> {
    stdout_of(args, run(args, COMMAND_TIMEOUT)?)
}

/// What a `docker` command said.
struct Said {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Its stdout when the command succeeded, else its stderr as [`ServerError::Container`] (with
/// the subcommand `args[0]` only: the other arguments may hold a password).
fn stdout_of(args: &[&str], said: Said) -> Result<String, ServerError> {
    if said.status.success() {
        Ok(String::from_utf8_lossy(&said.stdout).into_owned())
    } else {
        Err(ServerError::Container(format!(
            "`docker {}` failed ({}): {}",
            args.first().copied().unwrap_or_default(),
            said.status,
            String::from_utf8_lossy(&said.stderr).trim()
        )))
    }
}

/// Runs `docker args...`, killed after `timeout`.
///
/// # Errors
///
/// [`ServerError::Container`] when the command cannot be run, [`ServerError::ContainerTimeout`]
/// when it did not finish in time.
fn run(args: &[&str], timeout: Duration) -> Result<Said, ServerError> {
    let mut command = Command::new("docker");
    command.args(args);
    run_command(command, args, timeout)
}

/// [`run`] for a prepared `docker` command (tests give it another engine's address).
fn run_command(
    mut command: Command,
    args: &[&str],
    timeout: Duration,
) -> Result<Said, ServerError> {
    match run_with_deadline(&mut command, timeout) {
        Ok(Some(said)) => Ok(said),
        Ok(None) => Err(ServerError::ContainerTimeout {
            command: args.first().copied().unwrap_or_default().to_owned(),
            timeout,
        }),
        Err(err) => Err(ServerError::Container(format!(
            "{CANNOT_RUN} ({err}); install Docker, or run scripts/ensure-docker.sh, which \
             starts an engine and builds a local image"
        ))),
    }
}

/// Runs `command` with its output captured; `None` when it did not finish within `timeout`,
/// then it is killed (by its pid: this child only) and reaped. `Command::output` has no
/// deadline, and the `docker` command waits for an engine that accepted the connection but
/// does not answer as long as it takes.
fn run_with_deadline(command: &mut Command, timeout: Duration) -> io::Result<Option<Said>> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Read while it runs: a full pipe would stop it.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(1);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            // The readers end when the pipes close; not waited for.
            return Ok(None);
        }
        thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(20));
    };
    Ok(Some(Said {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }))
}

/// A thread reading `pipe` to its end.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// The engine's version, when an engine answers the `docker` command.
///
/// # Errors
///
/// [`ServerError::Container`] with the command's words when no engine answers,
/// [`ServerError::ContainerTimeout`] when it does not answer in time.
pub(crate) fn engine_version() -> Result<String, ServerError> {
    let args = ["version", "--format", "{{.Server.Version}}"];
    Ok(stdout_of(&args, run(&args, VERSION_TIMEOUT)?)?
        .trim()
        .to_owned())
}

/// Runs `image` (present in the engine: nothing is pulled) with `args` on the host network and
/// waits until the server in it answers on `127.0.0.1:port`. Returns the container and the
/// server's flavour and version (`Redis server v=7.4.1`).
pub(super) fn launch(
    image: &str,
    args: &[String],
    port: u16,
    password: Option<&str>,
) -> Result<(Container, String), LaunchError> {
    let label = format!("{LABEL}={}", std::process::id());
    // A name no other container has, given before anything is asked of the engine: when
    // `docker run` fails after creating the container (its start failed: it stays "Created")
    // or is killed at its deadline, the container is removed by this name. (`--cidfile` would
    // not do: the command writes it only once the engine has answered the create.)
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let name = format!(
        "distlock-{}-{}-{port}-{nanos}",
        std::process::id(),
        LAUNCHES.fetch_add(1, Ordering::Relaxed)
    );
    let mut run = vec![
        "run",
        "--detach",
        "--pull",
        "never",
        "--name",
        &name,
        "--network",
        "host",
        "--label",
        &label,
        image,
    ];
    run.extend(args.iter().map(String::as_str));
    let id = match docker(&run) {
        Ok(id) => id.trim().to_owned(),
        Err(err) => {
            remove(&name);
            return Err(LaunchError::Fatal(with_image_hint(err, image)));
        }
    };
    let container = Container {
        id,
        image: image.to_owned(),
    };
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut delay = Duration::from_millis(10);
    loop {
        // The ready line comes once the server listens, so a server answering the port after it
        // is this one: had the port been taken, this server would have exited instead.
        let logs = container.read_logs().map_err(LaunchError::Fatal)?;
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

/// `err` with how to make `image` present when the engine does not have it.
fn with_image_hint(err: ServerError, image: &str) -> ServerError {
    match err {
        ServerError::Container(words) if words.contains("No such image") => {
            ServerError::Container(format!(
                "{words} (nothing is pulled: load {image} into the engine first, with \
                 `docker load -i <file>` or `docker import`, or run scripts/ensure-docker.sh, \
                 which builds a local image)"
            ))
        }
        other => other,
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
    }

    #[test]
    fn a_command_gives_its_output_and_status() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo out; echo err >&2; exit 3"]);
        let said = run_with_deadline(&mut command, Duration::from_secs(30))
            .unwrap()
            .expect("finished");
        assert_eq!(said.status.code(), Some(3));
        assert_eq!(said.stdout, b"out\n");
        assert_eq!(said.stderr, b"err\n");
    }

    #[test]
    fn a_command_past_its_deadline_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let mut command = Command::new("sh");
        command
            .args(["-c", "echo $$ > \"$0\"; exec sleep 30"])
            .arg(&pid_file);
        let started = Instant::now();
        let said = run_with_deadline(&mut command, Duration::from_millis(500)).unwrap();
        assert!(said.is_none(), "finished although it sleeps 30 s");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        // Killed and reaped: no such process any more.
        assert!(
            !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists(),
            "process {pid} still there"
        );
    }

    /// An engine that accepts connections and never answers: `docker` would wait for ever.
    #[test]
    fn a_wedged_engine_gives_a_typed_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        // Holds every connection open, unanswered; ends with the test process.
        thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                held.push(stream);
            }
        });
        let mut command = Command::new("docker");
        command
            .env("DOCKER_HOST", format!("unix://{}", socket.display()))
            .args(["version", "--format", "{{.Server.Version}}"]);
        let started = Instant::now();
        match run_command(command, &["version"], Duration::from_secs(2)) {
            Err(ServerError::ContainerTimeout { command, timeout }) => {
                assert_eq!(command, "version");
                assert_eq!(timeout, Duration::from_secs(2));
                assert!(started.elapsed() < Duration::from_secs(15));
            }
            Err(ServerError::Container(words)) if words.contains("cannot run") => {
                eprintln!("skipped: no docker command ({words})");
            }
            other => panic!(
                "expected ContainerTimeout, got {:?}",
                other.map(|said| said.status)
            ),
        }
    }
}
