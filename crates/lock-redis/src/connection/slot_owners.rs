//! Which primary serves each cluster slot, as `CLUSTER SLOTS` told it: used only to put the
//! renewals of one node in one script. redis-rs keeps its own slot map private, so this is a
//! copy of our own, read when first needed and again after a sign that it is stale (a `MOVED`,
//! or a renewal answered "not served here").
//!
//! It never decides where a request goes (redis-rs routes by the request's first key) nor
//! whether a key may be touched (the server refuses a key it does not serve): a stale copy
//! only costs renewals sent again by slot.

use redis::Value;

/// No known owner for a slot.
const UNKNOWN: u16 = u16::MAX;
/// The number of slots of a Redis Cluster.
const SLOTS: usize = 16_384;

/// The primary serving each slot, as a small number naming the node.
pub(crate) struct SlotOwners {
    owner: Box<[u16]>,
    /// Each node's address (`host`, `port`), by its number.
    addresses: Vec<(String, u16)>,
}

impl SlotOwners {
    /// Reads a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, …], replicas…], …]`.
    /// Ranges it cannot read are left unknown.
    pub(crate) fn from_cluster_slots(reply: &Value) -> SlotOwners {
        let mut owner = vec![UNKNOWN; SLOTS].into_boxed_slice();
        let mut nodes: Vec<String> = Vec::new();
        let mut addresses = Vec::new();
        let Value::Array(ranges) = reply else {
            return SlotOwners { owner, addresses };
        };
        for range in ranges {
            let Value::Array(fields) = range else {
                continue;
            };
            let (Some(start), Some(end), Some((primary, host_port))) = (
                fields.first().and_then(integer),
                fields.get(1).and_then(integer),
                fields.get(2).and_then(node),
            ) else {
                continue;
            };
            let index = match nodes.iter().position(|node| *node == primary) {
                Some(index) => index,
                None => {
                    nodes.push(primary);
                    addresses.push(host_port);
                    nodes.len() - 1
                }
            };
            let Ok(index) = u16::try_from(index) else {
                continue;
            };
            let end = usize::try_from(end).map_or(0, |end| end.min(SLOTS - 1));
            if let Ok(start) = usize::try_from(start)
                && start <= end
            {
                owner[start..=end].fill(index);
            }
        }
        SlotOwners { owner, addresses }
    }

    /// The node serving `slot`, if known: a number below [`SlotOwners::nodes`].
    pub(crate) fn node_of(&self, slot: u16) -> Option<usize> {
        match self.owner.get(usize::from(slot)) {
            Some(&UNKNOWN) | None => None,
            Some(&node) => Some(usize::from(node)),
        }
    }

    /// How many primaries serve slots.
    pub(crate) fn nodes(&self) -> usize {
        self.addresses.len()
    }

    /// The primaries' addresses (`host`, `port`), by node number.
    pub(crate) fn primaries(&self) -> &[(String, u16)] {
        &self.addresses
    }
}

fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Int(number) => Some(*number),
        _ => None,
    }
}

/// A node entry `[host, port, id, …]`: one string naming the node (its id when given: a node
/// keeps it across address changes; else `host:port`), and its address.
fn node(value: &Value) -> Option<(String, (String, u16))> {
    let Value::Array(fields) = value else {
        return None;
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    };
    let host = text(fields.first()?)?;
    let port = u16::try_from(integer(fields.get(1)?)?).ok()?;
    let name = match fields.get(2).and_then(text) {
        Some(id) if !id.is_empty() => id,
        _ => format!("{host}:{port}"),
    };
    Some((name, (host, port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(id.into()),
        ])
    }

    fn range(start: i64, end: i64, primary: Value, replicas: Vec<Value>) -> Value {
        let mut fields = vec![Value::Int(start), Value::Int(end), primary];
        fields.extend(replicas);
        Value::Array(fields)
    }

    #[test]
    fn reads_ranges_and_groups_them_by_primary() {
        let reply = Value::Array(vec![
            range(
                0,
                5460,
                node("127.0.0.1", 7000, "a"),
                vec![node("127.0.0.1", 7003, "d")],
            ),
            range(5461, 10922, node("127.0.0.1", 7001, "b"), vec![]),
            range(10923, 12000, node("127.0.0.1", 7002, "c"), vec![]),
            // A second range of the first node (after a slot move).
            range(12001, 16383, node("127.0.0.1", 7000, "a"), vec![]),
        ]);
        let owners = SlotOwners::from_cluster_slots(&reply);
        assert_eq!(owners.nodes(), 3);
        assert_eq!(owners.primaries()[0], ("127.0.0.1".to_owned(), 7000));
        assert_eq!(owners.node_of(0), owners.node_of(16383));
        assert_eq!(owners.node_of(0), owners.node_of(5460));
        assert_ne!(owners.node_of(5460), owners.node_of(5461));
        assert_ne!(owners.node_of(10923), owners.node_of(10922));
        assert_ne!(owners.node_of(10923), owners.node_of(0));
        assert!(owners.node_of(16384).is_none());
    }

    #[test]
    fn unreadable_or_missing_ranges_are_unknown() {
        let reply = Value::Array(vec![
            range(0, 99, node("127.0.0.1", 7000, ""), vec![]),
            Value::Int(3),
            Value::Array(vec![Value::Int(200)]),
        ]);
        let owners = SlotOwners::from_cluster_slots(&reply);
        assert_eq!(owners.nodes(), 1);
        assert_eq!(owners.node_of(99), Some(0));
        assert_eq!(owners.node_of(100), None);
        assert_eq!(owners.node_of(200), None);
        assert_eq!(SlotOwners::from_cluster_slots(&Value::Nil).node_of(0), None);
    }
}
