//! Spawning server processes that never outlive the test process.

use std::io;
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread;

/// Sends every spawn through one long-lived thread: `PR_SET_PDEATHSIG` fires when the
/// *thread* that forked the child exits, so forking from short-lived test threads would kill
/// servers early. The spawner thread lives until the process exits.
pub(super) fn spawn(command: Command) -> io::Result<Child> {
    type Job = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("lock-testkit-spawner".to_owned())
            .spawn(move || {
                for (mut command, reply) in receiver {
                    let _ = reply.send(command.spawn());
                }
            })
            .ok()
            .map(|_| sender)
    });
    let Some(spawner) = spawner else {
        // No spawner thread could be created: fall back to this thread (the server then
        // also dies when this thread exits, on Linux).
        let mut command = command;
        return command.spawn();
    };
    let (reply, result) = mpsc::channel();
    spawner
        .send((command, reply))
        .map_err(|_| io::Error::other("the lock-testkit spawner thread is gone"))?;
    result
        .recv()
        .map_err(|_| io::Error::other("the lock-testkit spawner thread is gone"))?
}

/// Makes the child get `SIGKILL` when the test process dies (even by `SIGKILL`).
#[cfg(target_os = "linux")]
pub(super) fn set_parent_death_signal(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    #[allow(unsafe_code)]
    // SAFETY: the closure runs in the forked child before `exec`; it only calls the
    // async-signal-safe `prctl` and `getppid` and builds errors without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) == -1
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn set_parent_death_signal(_command: &mut Command) {}
