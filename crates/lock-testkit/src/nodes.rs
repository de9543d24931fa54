//! Several independent `redis-server` processes, for tests of multi-node locks.
//!
//! [`RedisNodes`] starts `n` [`RedisServer`]s, each on its own free loopback port and in its
//! own temporary directory. The nodes know nothing of each other: no replication, no
//! cluster, no shared data. That is the setup RedLock and MultiLock expect — independent
//! masters, a majority of which must grant a lock — and every node keeps the fault controls
//! of a single [`RedisServer`] ([`pause`](RedisNodes::pause),
//! [`resume`](RedisNodes::resume), [`kill`](RedisNodes::kill),
//! [`restart`](RedisNodes::restart), [`stop`](RedisNodes::stop)), addressed by node index.

use std::ops::{Index, IndexMut};
use std::thread;

use crate::server::{RedisServer, ServerError, ServerOptions};

/// `n` independent real `redis-server` (or `valkey-server`) processes on loopback, for
/// tests of multi-node locks (RedLock, MultiLock).
///
/// The nodes are independent: no replication, no cluster, each with its own port, directory
/// and data. Node `i` is a plain [`RedisServer`], reachable by indexing (`nodes[i]`),
/// [`get`](Self::get) or [`iter`](Self::iter); the fault controls take the node index and
/// panic, like indexing, when it is out of range. Dropping a `RedisNodes` kills every
/// process (see [`RedisServer`]'s drop).
///
/// ```
/// use lock_testkit::RedisNodes;
///
/// let mut nodes = RedisNodes::start(3)?;
/// assert_eq!(nodes.len(), 3);
/// let mut con = nodes[0].client().get_connection()?;
/// redis::cmd("SET").arg("key").arg("value").exec(&mut con)?;
///
/// // The other nodes do not see the key: they are independent.
/// let mut con = nodes[1].client().get_connection()?;
/// let value: Option<String> = redis::cmd("GET").arg("key").query(&mut con)?;
/// assert_eq!(value, None);
///
/// nodes.pause(1)?; // SIGSTOP node 1: a minority of the nodes hangs
/// nodes.resume(1)?;
/// nodes.kill(2)?; // SIGKILL node 2
/// nodes.restart(2)?; // same port, same directory
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RedisNodes {
    servers: Vec<RedisServer>,
}

impl RedisNodes {
    /// Starts `n` independent servers with the default [`ServerOptions`].
    ///
    /// See [`start_with`](Self::start_with).
    ///
    /// ```
    /// use lock_testkit::RedisNodes;
    ///
    /// let nodes = RedisNodes::start(2)?;
    /// assert_ne!(nodes[0].port(), nodes[1].port());
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn start(n: usize) -> Result<Self, ServerError> {
        Self::start_with(n, ServerOptions::default())
    }

    /// Starts `n` independent servers, all with the same `options`, concurrently (one thread
    /// each), each on its own free loopback port and in its own temporary directory, exactly
    /// like [`RedisServer::start_with`].
    ///
    /// Blocks until every server answers `PING` (at most 10 s each, in parallel).
    ///
    /// # Errors
    ///
    /// [`ServerError::NoNodes`] when `n` is 0. If any server fails to start, the ones that
    /// did start are killed and the error of the lowest-numbered failing node is returned.
    ///
    /// ```
    /// use lock_testkit::{RedisNodes, ServerError, ServerOptions};
    ///
    /// let nodes = RedisNodes::start_with(3, ServerOptions::new().aof_fsync_always(true))?;
    /// assert_eq!(nodes.len(), 3);
    ///
    /// let err = RedisNodes::start_with(0, ServerOptions::new()).unwrap_err();
    /// assert!(matches!(err, ServerError::NoNodes));
    /// # Ok::<(), ServerError>(())
    /// ```
    pub fn start_with(n: usize, options: ServerOptions) -> Result<Self, ServerError> {
        if n == 0 {
            return Err(ServerError::NoNodes);
        }
        let results: Vec<Result<RedisServer, ServerError>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let options = options.clone();
                    scope.spawn(move || RedisServer::start_with(options))
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        // On error, the servers that started are dropped here, which kills them.
        let servers = results.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(Self { servers })
    }

    /// The number of nodes.
    ///
    /// ```
    /// # let nodes = lock_testkit::RedisNodes::start(2)?;
    /// assert_eq!(nodes.len(), 2);
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are no nodes; always `false`, since starting zero nodes is an error.
    ///
    /// ```
    /// # let nodes = lock_testkit::RedisNodes::start(1)?;
    /// assert!(!nodes.is_empty());
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Node `index`, or `None` if out of range.
    ///
    /// ```
    /// # let nodes = lock_testkit::RedisNodes::start(2)?;
    /// assert!(nodes.get(1).is_some());
    /// assert!(nodes.get(2).is_none());
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn get(&self, index: usize) -> Option<&RedisServer> {
        self.servers.get(index)
    }

    /// Node `index` mutably, or `None` if out of range.
    ///
    /// ```
    /// # let mut nodes = lock_testkit::RedisNodes::start(1)?;
    /// if let Some(node) = nodes.get_mut(0) {
    ///     node.kill()?;
    /// }
    /// assert_eq!(nodes[0].pid(), None);
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn get_mut(&mut self, index: usize) -> Option<&mut RedisServer> {
        self.servers.get_mut(index)
    }

    /// The nodes, in index order.
    ///
    /// ```
    /// # let nodes = lock_testkit::RedisNodes::start(2)?;
    /// let ports: Vec<u16> = nodes.iter().map(|node| node.port()).collect();
    /// assert_eq!(ports.len(), 2);
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn iter(&self) -> std::slice::Iter<'_, RedisServer> {
        self.servers.iter()
    }

    /// The nodes mutably, in index order.
    ///
    /// ```
    /// # let mut nodes = lock_testkit::RedisNodes::start(2)?;
    /// for node in nodes.iter_mut() {
    ///     node.stop()?;
    /// }
    /// assert!(nodes.iter().all(|node| node.pid().is_none()));
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, RedisServer> {
        self.servers.iter_mut()
    }

    /// The connection URL of every node, in index order (see [`RedisServer::url`]).
    ///
    /// ```
    /// # let nodes = lock_testkit::RedisNodes::start(2)?;
    /// let urls = nodes.urls();
    /// assert_eq!(urls[0], format!("redis://127.0.0.1:{}/", nodes[0].port()));
    /// let clients: Vec<redis::Client> = urls
    ///     .iter()
    ///     .map(|url| redis::Client::open(url.as_str()))
    ///     .collect::<Result<_, _>>()?;
    /// # let _ = clients;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The TCP port of every node, in index order; all distinct.
    ///
    /// ```
    /// # let nodes = lock_testkit::RedisNodes::start(2)?;
    /// let ports = nodes.ports();
    /// assert_ne!(ports[0], ports[1]);
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn ports(&self) -> Vec<u16> {
        self.servers.iter().map(RedisServer::port).collect()
    }

    /// Freezes node `index` with `SIGSTOP` (see [`RedisServer::pause`]).
    ///
    /// # Panics
    ///
    /// If `index >= self.len()`.
    ///
    /// ```
    /// # let mut nodes = lock_testkit::RedisNodes::start(2)?;
    /// nodes.pause(1)?;
    /// assert!(nodes[1].is_paused());
    /// assert!(!nodes[0].is_paused());
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    #[track_caller]
    pub fn pause(&mut self, index: usize) -> Result<(), ServerError> {
        self.node_mut(index).pause()
    }

    /// Resumes node `index`, frozen by [`pause`](Self::pause), with `SIGCONT` (see
    /// [`RedisServer::resume`]).
    ///
    /// # Panics
    ///
    /// If `index >= self.len()`.
    ///
    /// ```
    /// # let mut nodes = lock_testkit::RedisNodes::start(2)?;
    /// nodes.pause(0)?;
    /// nodes.resume(0)?;
    /// assert!(!nodes[0].is_paused());
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    #[track_caller]
    pub fn resume(&mut self, index: usize) -> Result<(), ServerError> {
        self.node_mut(index).resume()
    }

    /// Crashes node `index` with `SIGKILL` (see [`RedisServer::kill`]); does nothing if it is
    /// not running.
    ///
    /// # Panics
    ///
    /// If `index >= self.len()`.
    ///
    /// ```
    /// # let mut nodes = lock_testkit::RedisNodes::start(2)?;
    /// nodes.kill(1)?;
    /// assert!(!nodes[1].is_running());
    /// assert!(nodes[0].is_running());
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    #[track_caller]
    pub fn kill(&mut self, index: usize) -> Result<(), ServerError> {
        self.node_mut(index).kill()
    }

    /// Starts node `index` again on the same port and directory (see
    /// [`RedisServer::restart`]); a running node is stopped first.
    ///
    /// # Panics
    ///
    /// If `index >= self.len()`.
    ///
    /// ```
    /// # let mut nodes = lock_testkit::RedisNodes::start(1)?;
    /// let port = nodes[0].port();
    /// nodes.kill(0)?;
    /// nodes.restart(0)?;
    /// assert!(nodes[0].is_running());
    /// assert_eq!(nodes[0].port(), port);
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    #[track_caller]
    pub fn restart(&mut self, index: usize) -> Result<(), ServerError> {
        self.node_mut(index).restart()
    }

    /// Stops node `index` gracefully (see [`RedisServer::stop`]); does nothing if it is not
    /// running.
    ///
    /// # Panics
    ///
    /// If `index >= self.len()`.
    ///
    /// ```
    /// # let mut nodes = lock_testkit::RedisNodes::start(1)?;
    /// nodes.stop(0)?;
    /// assert_eq!(nodes[0].pid(), None);
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    #[track_caller]
    pub fn stop(&mut self, index: usize) -> Result<(), ServerError> {
        self.node_mut(index).stop()
    }

    /// Freezes every node with `SIGSTOP` (see [`RedisServer::pause`]).
    ///
    /// Every node is tried, even after a failure; the first error (e.g.
    /// [`ServerError::NotRunning`] for a killed node) is returned.
    ///
    /// ```
    /// # let mut nodes = lock_testkit::RedisNodes::start(2)?;
    /// nodes.pause_all()?;
    /// assert!(nodes.iter().all(|node| node.is_paused()));
    /// nodes.resume_all()?;
    /// assert!(nodes.iter().all(|node| !node.is_paused()));
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn pause_all(&mut self) -> Result<(), ServerError> {
        self.for_each_node(RedisServer::pause)
    }

    /// Resumes every node with `SIGCONT` (see [`RedisServer::resume`]).
    ///
    /// Every node is tried, even after a failure; the first error is returned.
    ///
    /// ```
    /// # let mut nodes = lock_testkit::RedisNodes::start(2)?;
    /// nodes.pause_all()?;
    /// nodes.resume_all()?;
    /// assert!(nodes.iter().all(|node| !node.is_paused()));
    /// # Ok::<(), lock_testkit::ServerError>(())
    /// ```
    pub fn resume_all(&mut self) -> Result<(), ServerError> {
        self.for_each_node(RedisServer::resume)
    }

    fn for_each_node(
        &mut self,
        mut op: impl FnMut(&mut RedisServer) -> Result<(), ServerError>,
    ) -> Result<(), ServerError> {
        let mut first_error = None;
        for server in &mut self.servers {
            if let Err(err) = op(server) {
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    #[track_caller]
    fn node(&self, index: usize) -> &RedisServer {
        let len = self.servers.len();
        self.servers.get(index).unwrap_or_else(|| {
            panic!("node index {index} out of range: RedisNodes has {len} node(s)")
        })
    }

    #[track_caller]
    fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        let len = self.servers.len();
        self.servers.get_mut(index).unwrap_or_else(|| {
            panic!("node index {index} out of range: RedisNodes has {len} node(s)")
        })
    }
}

/// Node `index`.
///
/// # Panics
///
/// If `index >= self.len()`.
///
/// ```
/// # let nodes = lock_testkit::RedisNodes::start(2)?;
/// println!("node 1 listens on {}", nodes[1].addr());
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
impl Index<usize> for RedisNodes {
    type Output = RedisServer;

    #[track_caller]
    fn index(&self, index: usize) -> &RedisServer {
        self.node(index)
    }
}

/// Node `index`, mutably.
///
/// # Panics
///
/// If `index >= self.len()`.
///
/// ```
/// # let mut nodes = lock_testkit::RedisNodes::start(2)?;
/// nodes[0].kill()?;
/// assert_eq!(nodes[0].pid(), None);
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
impl IndexMut<usize> for RedisNodes {
    #[track_caller]
    fn index_mut(&mut self, index: usize) -> &mut RedisServer {
        self.node_mut(index)
    }
}

/// Iterates over the nodes, in index order (same as [`RedisNodes::iter`]).
///
/// ```
/// # let nodes = lock_testkit::RedisNodes::start(2)?;
/// for node in &nodes {
///     assert!(node.pid().is_some());
/// }
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
impl<'a> IntoIterator for &'a RedisNodes {
    type Item = &'a RedisServer;
    type IntoIter = std::slice::Iter<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.servers.iter()
    }
}

/// Iterates mutably over the nodes, in index order (same as [`RedisNodes::iter_mut`]).
///
/// ```
/// # let mut nodes = lock_testkit::RedisNodes::start(2)?;
/// for node in &mut nodes {
///     node.kill()?;
/// }
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
impl<'a> IntoIterator for &'a mut RedisNodes {
    type Item = &'a mut RedisServer;
    type IntoIter = std::slice::IterMut<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.servers.iter_mut()
    }
}
