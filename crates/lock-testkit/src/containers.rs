//! A Redis or Valkey server in a container, through the `testcontainers` crate (feature
//! `testcontainers`, off by default).
//!
//! **Process-based servers are the default**: [`RedisServer`](crate::RedisServer) runs the
//! `redis-server` (or `valkey-server`) found on the machine, needs no container engine, starts
//! in milliseconds and has fault controls (pause, kill, restart...). [`ContainerServer`] is for
//! the rare test that needs one exact image, e.g. a server version the machine does not have.
//! It needs a container engine (Docker or a compatible one, found the way `testcontainers`
//! finds it: `DOCKER_HOST`, `~/.testcontainers.properties`, the default socket) running on this
//! machine, since the server is reached on `127.0.0.1`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt, TestcontainersError};

/// A Redis image with an explicit tag, for [`ContainerServer::start`].
pub const REDIS_IMAGE: &str = "redis:7.4.1";
/// A Valkey image with an explicit tag, for [`ContainerServer::start`].
pub const VALKEY_IMAGE: &str = "valkey/valkey:8.0.1";

/// The port the server listens on inside the container.
const SERVER_PORT: u16 = 6379;
/// What both Redis and Valkey log once they accept connections.
const READY_LINE: &str = "Ready to accept connections";
/// How long [`ContainerServer::start`] waits for the server (pulling the image included).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// A Redis or Valkey server running in a container, reachable on `127.0.0.1` through a host
/// port mapped to the container's port 6379.
///
/// The container is removed when this value is dropped. Unlike
/// [`RedisServer`](crate::RedisServer) there are no fault controls and no password: it is the
/// image's default configuration.
///
/// ```no_run
/// use lock_testkit::containers::{ContainerServer, VALKEY_IMAGE};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let server = ContainerServer::start(VALKEY_IMAGE).await?;
/// let client = redis::Client::open(server.url())?;
/// let mut con = client.get_multiplexed_async_connection().await?;
/// let pong: String = redis::cmd("PING").query_async(&mut con).await?;
/// assert_eq!(pong, "PONG");
/// # Ok(())
/// # }
/// ```
pub struct ContainerServer {
    image: String,
    port: u16,
    container: ContainerAsync<GenericImage>,
}

impl std::fmt::Debug for ContainerServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerServer")
            .field("image", &self.image)
            .field("port", &self.port)
            .field("container", &self.container.id())
            .finish()
    }
}

impl ContainerServer {
    /// Starts a container of `image` (`name[:tag]`, e.g. [`REDIS_IMAGE`] or [`VALKEY_IMAGE`];
    /// the tag defaults to `latest`), pulling it if needed, and waits until the server logs that
    /// it accepts connections (at most 120 s, the pull included).
    ///
    /// # Errors
    ///
    /// The `testcontainers` error when no container engine is reachable, the image cannot be
    /// pulled, the server does not become ready in time, or the mapped port cannot be read.
    pub async fn start(image: &str) -> Result<Self, TestcontainersError> {
        let (name, tag) = split_image(image);
        let container = GenericImage::new(name, tag)
            .with_exposed_port(SERVER_PORT.tcp())
            .with_wait_for(WaitFor::message_on_stdout(READY_LINE))
            .with_startup_timeout(STARTUP_TIMEOUT)
            .start()
            .await?;
        let port = container.get_host_port_ipv4(SERVER_PORT.tcp()).await?;
        Ok(Self {
            image: image.to_owned(),
            port,
            container,
        })
    }

    /// The image the container runs, as given to [`start`](Self::start).
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The host port mapped to the container's port 6379.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's address, `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The connection URL, `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The container, for anything else `testcontainers` offers (logs, exec, stop...).
    pub fn container(&self) -> &ContainerAsync<GenericImage> {
        &self.container
    }
}

/// Splits `name[:tag]` into name and tag (`latest` by default); a `:` before the last `/`
/// belongs to a registry host (`host:5000/redis`), not to a tag.
fn split_image(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_split_into_name_and_tag() {
        assert_eq!(split_image(REDIS_IMAGE), ("redis", "7.4.1"));
        assert_eq!(split_image(VALKEY_IMAGE), ("valkey/valkey", "8.0.1"));
        assert_eq!(split_image("redis"), ("redis", "latest"));
        assert_eq!(
            split_image("localhost:5000/redis"),
            ("localhost:5000/redis", "latest")
        );
        assert_eq!(
            split_image("localhost:5000/redis:7"),
            ("localhost:5000/redis", "7")
        );
    }

    #[tokio::test]
    #[ignore = "needs a container engine"]
    async fn redis_and_valkey_images_answer_ping() {
        for image in [REDIS_IMAGE, VALKEY_IMAGE] {
            let server = ContainerServer::start(image)
                .await
                .unwrap_or_else(|err| panic!("start {image}: {err}"));
            assert_eq!(server.image(), image);
            assert_eq!(server.addr().port(), server.port());
            assert!(server.addr().ip().is_loopback());
            let client = redis::Client::open(server.url()).unwrap();
            let mut con = client.get_multiplexed_async_connection().await.unwrap();
            let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
            assert_eq!(pong, "PONG", "{image}");
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut con)
                .await
                .unwrap();
            let tag = image.rsplit_once(':').map(|(_, tag)| tag).unwrap();
            assert!(
                info.contains(tag),
                "{image} reports another version:\n{info}"
            );
        }
    }
}
