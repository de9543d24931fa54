//! [`ClientInfo`]: one parsed line of `CLIENT LIST`.

/// One connection from `CLIENT LIST` (see
/// [`RedisServer::client_list`](crate::RedisServer::client_list)).
///
/// Every `field=value` of the line is kept (see [`get`](Self::get)); the accessors cover the
/// fields tests use most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    fields: Vec<(String, String)>,
}

impl ClientInfo {
    /// Parses one line of `CLIENT LIST`.
    pub(super) fn parse(line: &str) -> Self {
        let fields = line
            .split_ascii_whitespace()
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        Self { fields }
    }

    /// The value of `field` (e.g. `"laddr"`, `"resp"`, `"lib-name"`), if the server sent it.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(key, _)| key == field)
            .map(|(_, value)| value.as_str())
    }

    /// The connection id (`id`), for
    /// [`RedisServer::kill_client`](crate::RedisServer::kill_client); 0 if missing.
    pub fn id(&self) -> u64 {
        self.number("id")
    }

    /// The client's address, `ip:port` (`addr`).
    pub fn addr(&self) -> &str {
        self.get("addr").unwrap_or_default()
    }

    /// The name set with `CLIENT SETNAME` (`name`); empty if none.
    pub fn name(&self) -> &str {
        self.get("name").unwrap_or_default()
    }

    /// The flags (`flags`), e.g. `N` (none), `P` (pub/sub), `S` (replica), `M` (master).
    pub fn flags(&self) -> &str {
        self.get("flags").unwrap_or_default()
    }

    /// The last command run (`cmd`), e.g. `evalsha` or `subscribe`.
    pub fn last_command(&self) -> &str {
        self.get("cmd").unwrap_or_default()
    }

    /// Whether the connection is subscribed to something (flag `P`).
    pub fn is_pubsub(&self) -> bool {
        self.flags().contains('P')
    }

    /// The number of channel, pattern and shard-channel subscriptions (`sub + psub + ssub`).
    pub fn subscriptions(&self) -> u64 {
        ["sub", "psub", "ssub"]
            .iter()
            .map(|field| self.number(field))
            .sum()
    }

    fn number(&self, field: &str) -> u64 {
        self.get(field)
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_info_parses_a_client_list_line() {
        let line = "id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=9 name=a=b age=3 \
                    idle=0 flags=P db=0 sub=2 psub=1 ssub=0 multi=-1 cmd=subscribe resp=3";
        let client = ClientInfo::parse(line);
        assert_eq!(client.id(), 7);
        assert_eq!(client.addr(), "127.0.0.1:5000");
        assert_eq!(client.name(), "a=b");
        assert!(client.is_pubsub());
        assert_eq!(client.subscriptions(), 3);
        assert_eq!(client.last_command(), "subscribe");
        assert_eq!(client.get("resp"), Some("3"));
        assert_eq!(client.get("missing"), None);
        let empty = ClientInfo::parse("id=8 name= flags=N");
        assert_eq!(empty.name(), "");
        assert!(!empty.is_pubsub());
    }
}
