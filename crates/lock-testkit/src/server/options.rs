//! [`ServerOptions`] and the configuration file they turn into.

use std::path::{Path, PathBuf};

use super::error::ServerError;

/// The cluster configuration file, in the server's directory.
const CLUSTER_CONFIG_FILE: &str = "nodes.conf";

/// Options for [`RedisServer::start_with`](crate::RedisServer::start_with).
///
/// The default is a plain server without any persistence (`save ""`, `appendonly no`),
/// without password, memory limit or cluster mode, using the binary found by
/// [`find_server_binary`](crate::server::find_server_binary).
///
/// ```
/// use lock_testkit::ServerOptions;
///
/// let options = ServerOptions::new()
///     .aof_fsync_always(true)
///     .requirepass(Some("secret".to_owned()))
///     .config("hz", "50");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    aof_fsync_always: bool,
    pub(super) cluster_enabled: bool,
    pub(crate) requirepass: Option<String>,
    maxmemory: Option<u64>,
    extra_config: Vec<(String, String)>,
    pub(super) binary: Option<PathBuf>,
    pub(super) sentinel: Option<SentinelMonitor>,
    /// The image to run the server in, instead of a process (feature `testcontainers`).
    #[cfg(feature = "testcontainers")]
    pub(super) container: Option<String>,
    /// TLS only, with these certificates (feature `tls`).
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<crate::tls::ServerTls>,
}

/// What a Sentinel watches (see [`ServerOptions::sentinel`]).
#[derive(Debug, Clone)]
pub(crate) struct SentinelMonitor {
    service: String,
    primary_port: u16,
    quorum: u32,
    down_after: std::time::Duration,
    auth_pass: Option<String>,
}

impl ServerOptions {
    /// The default options (same as [`Default::default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Enables the append-only file with `appendfsync always`, so every acknowledged write
    /// survives [`RedisServer::kill`](crate::RedisServer::kill) +
    /// [`RedisServer::restart`](crate::RedisServer::restart). Off by default (no persistence at
    /// all).
    pub fn aof_fsync_always(mut self, enabled: bool) -> Self {
        self.aof_fsync_always = enabled;
        self
    }

    /// Runs the server with `cluster-enabled yes` (cluster config file and bus port chosen
    /// automatically). The node owns no slots: this is meant for commands such as
    /// `CLUSTER KEYSLOT`, not for storing data.
    pub fn cluster_enabled(mut self, enabled: bool) -> Self {
        self.cluster_enabled = enabled;
        self
    }

    /// Sets `requirepass`; [`RedisServer::url`](crate::RedisServer::url) then carries the
    /// password.
    pub fn requirepass(mut self, password: Option<String>) -> Self {
        self.requirepass = password;
        self
    }

    /// Sets `maxmemory` (in bytes) with `maxmemory-policy noeviction`.
    pub fn maxmemory(mut self, bytes: Option<u64>) -> Self {
        self.maxmemory = bytes;
        self
    }

    /// Replaces the extra configuration directives, written after all the others (so they
    /// win). Each value is one argument and is quoted for the config file, e.g.
    /// `("save", "900 1")` or `("hz", "50")`.
    pub fn extra_config(mut self, extra: Vec<(String, String)>) -> Self {
        self.extra_config = extra;
        self
    }

    /// Appends one extra configuration directive (see [`ServerOptions::extra_config`]).
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_config.push((key.into(), value.into()));
        self
    }

    /// Runs the binary as a Sentinel (`--sentinel`) watching the primary on `primary_port` under
    /// the name `service`, with `quorum`, `down-after-milliseconds` of `down_after`, a
    /// failover timeout of twice that (at least 1 s), and `auth_pass` for the data nodes.
    /// Persistence, cluster options and `requirepass` do not apply to a Sentinel.
    pub fn sentinel(
        mut self,
        service: impl Into<String>,
        primary_port: u16,
        quorum: u32,
        down_after: std::time::Duration,
        auth_pass: Option<String>,
    ) -> Self {
        self.sentinel = Some(SentinelMonitor {
            service: service.into(),
            primary_port,
            quorum,
            down_after,
            auth_pass,
        });
        self.requirepass = None;
        self
    }

    /// Whether this is a Sentinel.
    pub(crate) fn is_sentinel(&self) -> bool {
        self.sentinel.is_some()
    }

    /// Runs the server on TLS only (feature `tls`): `port 0`, `tls-port` on the server's port,
    /// the server certificate, key and CA of `certs`, and `tls-auth-clients yes` (mutual TLS:
    /// clients must present a certificate signed by the CA) or `no`. Replication runs over TLS
    /// too (`tls-replication yes`), and so does the cluster bus of a cluster node
    /// (`tls-cluster yes`) and a Sentinel's links. [`RedisServer::url`](crate::RedisServer::url)
    /// is then `rediss://`, and the fixtures' own clients use the CA and the client certificate.
    /// Not for servers in containers (the certificate files are on the host).
    ///
    /// A binary built without TLS refuses to start: [`ServerError::TlsUnsupported`].
    ///
    /// ```
    /// use lock_testkit::{ServerOptions, TestCerts};
    ///
    /// let certs = TestCerts::generate()?;
    /// let options = ServerOptions::new().tls(&certs, true);
    /// # let _ = options;
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls(mut self, certs: &crate::tls::TestCerts, auth_clients: bool) -> Self {
        self.tls = Some(crate::tls::ServerTls {
            certs: certs.clone(),
            auth_clients,
        });
        self
    }

    /// Whether the server runs on TLS only.
    #[cfg(feature = "tls")]
    pub(crate) fn has_tls(&self) -> bool {
        self.tls.is_some()
    }

    #[cfg(not(feature = "tls"))]
    pub(crate) fn has_tls(&self) -> bool {
        false
    }

    /// Overrides the server binary (a path, or a name looked up on `PATH`). `None` (the
    /// default) uses [`find_server_binary`](crate::server::find_server_binary).
    pub fn binary(mut self, binary: Option<PathBuf>) -> Self {
        self.binary = binary;
        self
    }

    /// Runs the server in a container of `image` instead of as a process of the test (feature
    /// `testcontainers`; see [`crate::containers`] for the engine, the image and what such a
    /// server cannot do): on the host network, bound to `127.0.0.1` on a free port chosen by
    /// the testkit, with these options as command-line arguments (`--port P --bind 127.0.0.1
    /// ...`, plus the cluster options for a cluster node). The image's entrypoint must run the
    /// server with the arguments it is given, as the official `redis` and `valkey/valkey`
    /// images do, and the engine must have it already: nothing is pulled (`docker load` or
    /// `docker import` it first). [`binary`](Self::binary) does not apply; a Sentinel cannot
    /// run in a container.
    ///
    /// ```no_run
    /// use lock_testkit::{RedisCluster, RedisServer, ServerOptions};
    ///
    /// let server = RedisServer::start_with(ServerOptions::new().container("redis:7.4"))?;
    /// assert!(server.container_id().is_some());
    /// let cluster = RedisCluster::start_with(3, 1, ServerOptions::new().container("redis:7.4"))?;
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    #[cfg(feature = "testcontainers")]
    pub fn container(mut self, image: impl Into<String>) -> Self {
        self.container = Some(image.into());
        self
    }
}

/// The configuration file of a server with `options`, in `dir`, on `port` (and `cluster_port`).
pub(super) fn render_config(
    options: &ServerOptions,
    dir: &Path,
    port: u16,
    cluster_port: Option<u16>,
) -> Result<String, ServerError> {
    let dir_str = dir
        .to_str()
        .ok_or_else(|| ServerError::InvalidConfig(format!("non UTF-8 dir {}", dir.display())))?;
    if let Some(monitor) = &options.sentinel {
        let service = &monitor.service;
        let down_after = monitor.down_after.as_millis().max(1);
        let mut out = String::from("# Generated by lock-testkit (Sentinel).\n");
        let mut base = base_directives(port, Some(dir_str));
        tls_directives(options, &mut base, port)?;
        for (key, value) in base {
            out.push_str(&format!("{key} {}\n", quote(&value)));
        }
        out.push_str(&format!(
            "sentinel monitor {service} 127.0.0.1 {} {}\n",
            monitor.primary_port, monitor.quorum
        ));
        out.push_str(&format!(
            "sentinel down-after-milliseconds {service} {down_after}\n"
        ));
        out.push_str(&format!(
            "sentinel failover-timeout {service} {}\n",
            (down_after * 2).max(1000)
        ));
        if let Some(password) = &monitor.auth_pass {
            out.push_str(&format!(
                "sentinel auth-pass {service} {}\n",
                quote(password)
            ));
        }
        return Ok(out);
    }
    let nodes = dir.join(CLUSTER_CONFIG_FILE);
    let nodes = nodes.to_str().unwrap_or(CLUSTER_CONFIG_FILE);
    let mut out = String::from("# Generated by lock-testkit.\n");
    for (key, value) in directives(options, Some(dir_str), port, cluster_port, nodes)? {
        out.push_str(&key);
        out.push(' ');
        out.push_str(&quote(&value));
        out.push('\n');
    }
    Ok(out)
}

/// The command line of a server with `options` in a container, on `port` (and `cluster_port`):
/// the directives of the configuration file as `--name value` arguments, without `dir` (the
/// server keeps the image's working directory, where the cluster configuration file goes too).
#[cfg(feature = "testcontainers")]
pub(super) fn render_args(
    options: &ServerOptions,
    port: u16,
    cluster_port: Option<u16>,
) -> Result<Vec<String>, ServerError> {
    if options.sentinel.is_some() {
        return Err(ServerError::InvalidConfig(
            "a Sentinel cannot run in a container (it rewrites its configuration file)".to_owned(),
        ));
    }
    if options.has_tls() {
        return Err(ServerError::InvalidConfig(
            "a server on TLS cannot run in a container (its certificate files are on the host)"
                .to_owned(),
        ));
    }
    let mut args = Vec::new();
    for (key, value) in directives(options, None, port, cluster_port, CLUSTER_CONFIG_FILE)? {
        // The server would read a value starting with `--` as the next option.
        if value.starts_with("--") {
            return Err(ServerError::InvalidConfig(format!(
                "the value of {key:?} starts with `--`, which a server's command line cannot carry"
            )));
        }
        args.push(format!("--{key}"));
        args.push(value);
    }
    Ok(args)
}

/// The directives every server (data node or Sentinel) starts with, values unquoted.
fn base_directives(port: u16, dir: Option<&str>) -> Vec<(String, String)> {
    let mut lines: Vec<(String, String)> = vec![
        ("port".into(), port.to_string()),
        ("bind".into(), "127.0.0.1".into()),
    ];
    if let Some(dir) = dir {
        lines.push(("dir".into(), dir.into()));
    }
    lines.extend([
        ("daemonize".into(), "no".into()),
        // Log to stdout, which goes to the log file together with stderr.
        ("logfile".into(), String::new()),
    ]);
    lines
}

/// The directives of a data node, values unquoted, the extra configuration last (so it wins).
fn directives(
    options: &ServerOptions,
    dir: Option<&str>,
    port: u16,
    cluster_port: Option<u16>,
    cluster_config_file: &str,
) -> Result<Vec<(String, String)>, ServerError> {
    let mut lines = base_directives(port, dir);
    tls_directives(options, &mut lines, port)?;
    lines.push(("save".into(), String::new()));
    if options.aof_fsync_always {
        lines.push(("appendonly".into(), "yes".into()));
        lines.push(("appendfsync".into(), "always".into()));
    } else {
        lines.push(("appendonly".into(), "no".into()));
    }
    if let Some(password) = &options.requirepass {
        lines.push(("requirepass".into(), password.clone()));
    }
    if let Some(bytes) = options.maxmemory {
        lines.push(("maxmemory".into(), bytes.to_string()));
        lines.push(("maxmemory-policy".into(), "noeviction".into()));
    }
    if options.cluster_enabled {
        lines.push(("cluster-enabled".into(), "yes".into()));
        lines.push(("cluster-config-file".into(), cluster_config_file.into()));
        if let Some(bus) = cluster_port {
            lines.push(("cluster-port".into(), bus.to_string()));
        }
    }
    for (key, value) in &options.extra_config {
        let valid = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(ServerError::InvalidConfig(format!(
                "config directive name {key:?} is not [A-Za-z0-9_-]+"
            )));
        }
        lines.push((key.clone(), value.clone()));
    }
    Ok(lines)
}

/// With [`ServerOptions::tls`]: the plain port off, the TLS port on `port`, the certificates,
/// and TLS for the links a server makes itself (replication, the cluster bus, a Sentinel's
/// links). `lines` starts with `port`.
#[cfg(feature = "tls")]
fn tls_directives(
    options: &ServerOptions,
    lines: &mut Vec<(String, String)>,
    port: u16,
) -> Result<(), ServerError> {
    let Some(tls) = &options.tls else {
        return Ok(());
    };
    let path = |path: &Path| {
        path.to_str()
            .map(str::to_owned)
            .ok_or_else(|| ServerError::InvalidConfig(format!("non UTF-8 path {}", path.display())))
    };
    let mut added = vec![
        ("tls-port".to_owned(), port.to_string()),
        (
            "tls-cert-file".to_owned(),
            path(tls.certs.server_cert_path())?,
        ),
        (
            "tls-key-file".to_owned(),
            path(tls.certs.server_key_path())?,
        ),
        ("tls-ca-cert-file".to_owned(), path(tls.certs.ca_path())?),
        (
            "tls-auth-clients".to_owned(),
            if tls.auth_clients { "yes" } else { "no" }.to_owned(),
        ),
        ("tls-replication".to_owned(), "yes".to_owned()),
    ];
    if options.cluster_enabled {
        added.push(("tls-cluster".to_owned(), "yes".to_owned()));
    }
    lines[0].1 = "0".to_owned();
    lines.extend(added);
    Ok(())
}

#[cfg(not(feature = "tls"))]
fn tls_directives(
    _options: &ServerOptions,
    _lines: &mut Vec<(String, String)>,
    _port: u16,
) -> Result<(), ServerError> {
    Ok(())
}

/// Quotes a value for the Redis config file parser (`sdssplitargs`).
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_for_sdssplitargs() {
        assert_eq!(quote(""), "\"\"");
        assert_eq!(quote("900 1"), "\"900 1\"");
        assert_eq!(quote("a\"b\\c\nd\x01"), "\"a\\\"b\\\\c\\nd\\x01\"");
    }

    #[test]
    fn config_rejects_bad_keys() {
        let options = ServerOptions::new().config("bad key", "1");
        let err = render_config(&options, Path::new("/tmp"), 1, None).unwrap_err();
        assert!(matches!(err, ServerError::InvalidConfig(_)));
    }

    #[cfg(feature = "testcontainers")]
    #[test]
    fn container_args_carry_the_same_directives() {
        let options = ServerOptions::new()
            .cluster_enabled(true)
            .requirepass(Some("a b".to_owned()))
            .config("hz", "50");
        let args = render_args(&options, 7000, Some(17000)).unwrap();
        let expected = [
            "--port",
            "7000",
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "no",
            "--logfile",
            "",
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            "a b",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            "17000",
            "--hz",
            "50",
        ];
        assert_eq!(args, expected);
        let err = render_args(&ServerOptions::new().config("hz", "--x"), 1, None).unwrap_err();
        assert!(matches!(err, ServerError::InvalidConfig(_)), "{err}");
        let sentinel = ServerOptions::new().sentinel("s", 1, 1, std::time::Duration::ZERO, None);
        let err = render_args(&sentinel, 1, None).unwrap_err();
        assert!(matches!(err, ServerError::InvalidConfig(_)), "{err}");
    }

    #[test]
    fn default_config_has_no_persistence() {
        let config = render_config(&ServerOptions::new(), Path::new("/tmp/x"), 7000, None).unwrap();
        assert!(config.contains("save \"\"\n"));
        assert!(config.contains("appendonly \"no\"\n"));
        assert!(config.contains("bind \"127.0.0.1\"\n"));
        assert!(!config.contains("cluster"));
        assert!(!config.contains("tls"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_config_turns_the_plain_port_off() {
        let certs = crate::tls::TestCerts::generate().unwrap();
        let options = ServerOptions::new().cluster_enabled(true).tls(&certs, true);
        let config = render_config(&options, Path::new("/tmp/x"), 7000, Some(17000)).unwrap();
        assert!(config.contains("port \"0\"\n"), "{config}");
        assert!(config.contains("tls-port \"7000\"\n"));
        assert!(config.contains("tls-auth-clients \"yes\"\n"));
        assert!(config.contains("tls-replication \"yes\"\n"));
        assert!(config.contains("tls-cluster \"yes\"\n"));
        assert!(config.contains(&format!(
            "tls-ca-cert-file \"{}\"",
            certs.ca_path().display()
        )));
        let sentinel = ServerOptions::new()
            .sentinel("s", 7000, 2, std::time::Duration::from_secs(1), None)
            .tls(&certs, false);
        let config = render_config(&sentinel, Path::new("/tmp/x"), 26379, None).unwrap();
        assert!(config.contains("port \"0\"\n"), "{config}");
        assert!(config.contains("tls-port \"26379\"\n"));
        assert!(config.contains("tls-auth-clients \"no\"\n"));
        assert!(config.contains("tls-replication \"yes\"\n"));
        assert!(!config.contains("tls-cluster"));
    }

    #[cfg(all(feature = "tls", feature = "testcontainers"))]
    #[test]
    fn tls_servers_do_not_run_in_containers() {
        let certs = crate::tls::TestCerts::generate().unwrap();
        let options = ServerOptions::new().container("redis:7").tls(&certs, true);
        assert!(matches!(
            render_args(&options, 7000, None),
            Err(ServerError::InvalidConfig(_))
        ));
    }
}
