//! Which server binary to run, and what version it is.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::error::ServerError;

/// Environment variable naming the server binary to use (a path, or a name looked up on `PATH`).
pub const SERVER_BINARY_ENV: &str = "DISTLOCK_REDIS_SERVER";

/// Finds the server binary: the `DISTLOCK_REDIS_SERVER` environment variable (a path, or a
/// name looked up on `PATH`), else `redis-server` on `PATH`, else `valkey-server` on `PATH`.
///
/// Returns [`ServerError::BinaryNotFound`], whose message says how to install one, when
/// nothing is found (or when `DISTLOCK_REDIS_SERVER` names something that does not exist).
pub fn find_server_binary() -> Result<PathBuf, ServerError> {
    resolve_binary(None)
}

/// `explicit` (from `ServerOptions::binary`) when given, else as [`find_server_binary`].
pub(super) fn resolve_binary(explicit: Option<&Path>) -> Result<PathBuf, ServerError> {
    if let Some(path) = explicit {
        return lookup(path.as_os_str()).ok_or_else(|| ServerError::BinaryNotFound {
            searched: format!("ServerOptions::binary = {}", path.display()),
        });
    }
    if let Some(value) = std::env::var_os(SERVER_BINARY_ENV).filter(|v| !v.is_empty()) {
        return lookup(&value).ok_or_else(|| ServerError::BinaryNotFound {
            searched: format!("{SERVER_BINARY_ENV}={}", Path::new(&value).display()),
        });
    }
    ["redis-server", "valkey-server"]
        .into_iter()
        .find_map(|name| lookup(OsStr::new(name)))
        .ok_or_else(|| ServerError::BinaryNotFound {
            searched: "redis-server and valkey-server on PATH".to_owned(),
        })
}

/// A path containing a separator is taken as is; a bare name is looked up on `PATH`.
pub(super) fn lookup_binary(name: &OsStr) -> Option<PathBuf> {
    lookup(name)
}

/// As [`lookup_binary`].
fn lookup(name: &OsStr) -> Option<PathBuf> {
    let path = Path::new(name);
    if path.components().count() > 1 || path.is_absolute() {
        return is_executable(path).then(|| path.to_path_buf());
    }
    let search = std::env::var_os("PATH")?;
    std::env::split_paths(&search)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// `<binary> --version`, trimmed to flavour and version (`Redis server v=7.0.15`); cached.
pub(super) fn server_version(binary: &Path) -> Result<String, ServerError> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(version) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(binary)
    {
        return Ok(version.clone());
    }
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(ServerError::Spawn)?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().next().unwrap_or_default().trim();
    let version = match line.find(" sha=") {
        Some(end) => &line[..end],
        None => line,
    }
    .to_owned();
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(binary.to_path_buf(), version.clone());
    Ok(version)
}
