//! The capability probe: asks a server, on connections of its own, which of the commands
//! distlock may use it answers (see [`Capabilities`]).
//!
//! Ordered so that a proxy that hangs up on a command it does not know cannot break it: every
//! command first goes out in one pipeline on a throw-away connection (one round trip on a full
//! server); when that connection is cut, the commands whose answers were lost are asked again
//! one at a time, on a new connection after each hang-up, so each hang-up is pinned on its own
//! command. The pub/sub commands switch a connection's mode, so each gets a connection too.
//! redis-rs names each connection with `CLIENT SETINFO` while connecting, which such a proxy
//! hangs up on as well: the probe's connections skip it, and
//! [`Capabilities::names_connections`] tells the backend whether its own may do it.

use std::time::Duration;

use lock_core::Result;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, Value};

use crate::wire::capabilities::{
    Capabilities, Capability, Support, classify, probe_command, server_info,
};
use crate::wire::errors::map_error;

/// Probes the server `client` reaches, each step bounded by `timeout`.
///
/// # Errors
///
/// When no connection can be opened at all: as for connecting (refused credentials, an
/// unreachable server, a timeout).
pub(crate) async fn probe(client: &Client, timeout: Duration) -> Result<Capabilities> {
    let client = unnamed(client)?;
    // Random enough to stay apart from other probes; the key is never written.
    let tag = crate::wire::reply::rand_start();
    let key = format!("distlock:probe:{{{tag}}}");
    let channel = format!("distlock:probe:{tag}");
    let asked: Vec<(Capability, redis::Cmd)> = Capability::ALL
        .iter()
        .filter_map(|&capability| {
            probe_command(capability, &key, &channel).map(|command| (capability, command))
        })
        .collect();
    let mut answers: Vec<Option<std::result::Result<Value, RedisError>>> =
        asked.iter().map(|_| None).collect();

    let mut connection = Some(open(&client, timeout).await?);
    // A plain `PING` first: every server and proxy answers it, so a connection that does not
    // (a TLS handshake the server rejects after it seemed done, say) is no server to probe.
    if let Some(open_connection) = &mut connection {
        let ping = tokio::time::timeout(
            timeout,
            redis::cmd("PING").query_async::<Value>(open_connection),
        )
        .await;
        match ping {
            Ok(Ok(_)) => {}
            // An ACL that refuses `PING` is judged by the backend (a clear error there).
            Ok(Err(error)) if error.code().is_some() => {}
            Ok(Err(error)) => return Err(map_error(&error, timeout)),
            Err(_) => return Err(lock_core::Error::Timeout { after: timeout }),
        }
    }
    // All at once: one round trip where nothing hangs up.
    if let Some(open_connection) = &connection {
        let sent = asked.iter().map(|(_, command)| {
            let mut connection = open_connection.clone();
            async move { connection.send_packed_command(command).await }
        });
        let all = futures_util::future::join_all(sent);
        if let Ok(replies) = tokio::time::timeout(timeout, all).await {
            for (answer, reply) in answers.iter_mut().zip(replies) {
                if !lost(&reply) {
                    *answer = Some(reply);
                }
            }
        }
    }
    // What the pipeline lost, one at a time.
    if answers.iter().any(Option::is_none) {
        connection = None;
        for ((_, command), answer) in asked.iter().zip(answers.iter_mut()) {
            if answer.is_some() {
                continue;
            }
            let open_connection = match &mut connection {
                Some(open_connection) => open_connection,
                None => connection.insert(open(&client, timeout).await?),
            };
            let reply =
                match tokio::time::timeout(timeout, open_connection.send_packed_command(command))
                    .await
                {
                    Ok(reply) => reply,
                    Err(_) => Err(RedisError::from(std::io::Error::from(
                        std::io::ErrorKind::TimedOut,
                    ))),
                };
            if lost(&reply) {
                connection = None;
            }
            *answer = Some(reply);
        }
    }
    drop(connection);

    let mut server = None;
    let mut supports = Vec::with_capacity(Capability::ALL.len());
    let mut asked_answers = asked.iter().zip(answers);
    for capability in Capability::ALL {
        let support = match capability {
            Capability::Subscribe => subscribes(&client, &channel, false, timeout).await,
            Capability::SSubscribe => subscribes(&client, &channel, true, timeout).await,
            _ => {
                let ((asked_capability, _), answer) =
                    asked_answers.next().expect("one answer per command asked");
                debug_assert_eq!(*asked_capability, capability);
                let answer = answer.expect("every command answered or lost");
                if capability == Capability::Hello
                    && let Ok(reply) = &answer
                {
                    server = server_info(reply);
                }
                classify(capability, &answer)
            }
        };
        supports.push(support);
    }
    Ok(Capabilities::new(server, supports))
}

/// `client` with redis-rs's `CLIENT SETINFO` left out of its connection setup.
pub(crate) fn unnamed(client: &Client) -> Result<Client> {
    let info = client.get_connection_info().clone();
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    Client::open(info.set_redis_settings(settings))
        .map_err(|error| map_error(&error, Duration::ZERO))
}

/// A new connection for the probe.
async fn open(client: &Client, timeout: Duration) -> Result<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|error| map_error(&error, timeout))
}

/// Whether an answer was lost with its connection (cut, or silent past the timeout) rather
/// than given.
fn lost(answer: &std::result::Result<Value, RedisError>) -> bool {
    answer.as_ref().is_err_and(|error| {
        error.is_io_error() || error.is_connection_dropped() || error.is_timeout()
    })
}

/// Whether the server lets a connection of its own (`sharded`: `SSUBSCRIBE`) subscribe to
/// `channel`. The connection goes into subscribed mode and is dropped after the one answer.
async fn subscribes(client: &Client, channel: &str, sharded: bool, timeout: Duration) -> Support {
    let capability = if sharded {
        Capability::SSubscribe
    } else {
        Capability::Subscribe
    };
    let mut connection = match open(client, timeout).await {
        Ok(connection) => connection,
        Err(_) => return Support::NotProbed,
    };
    let mut subscribe = redis::cmd(if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" });
    subscribe.arg(channel);
    let answer =
        match tokio::time::timeout(timeout, connection.send_packed_command(&subscribe)).await {
            Ok(answer) => answer,
            Err(_) => return Support::NoAnswer,
        };
    classify(capability, &answer)
}
