//! Free loopback ports for new servers, kept apart from the ports of live ones.

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

/// Ports handed to live servers of this process, so that a stopped server's port is not
/// given to another server before its restart.
static PORTS_IN_USE: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Free loopback ports, reserved in [`PORTS_IN_USE`] until dropped.
#[derive(Debug)]
pub(crate) struct PortReservation {
    pub(crate) ports: Vec<u16>,
}

impl PortReservation {
    /// Reserves `count` distinct free ports.
    pub(crate) fn new(count: usize) -> io::Result<Self> {
        let mut in_use = PORTS_IN_USE.lock().unwrap_or_else(PoisonError::into_inner);
        // Keep every listener open until done so the OS hands out distinct ports.
        let mut listeners = Vec::new();
        let mut ports = Vec::with_capacity(count);
        while ports.len() < count {
            if listeners.len() > 1000 {
                return Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    "could not find a free loopback port",
                ));
            }
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            let port = listener.local_addr()?.port();
            listeners.push(listener);
            if !in_use.contains(&port) {
                ports.push(port);
            }
        }
        in_use.extend(ports.iter().copied());
        Ok(Self { ports })
    }
}

impl Drop for PortReservation {
    fn drop(&mut self) {
        let mut in_use = PORTS_IN_USE.lock().unwrap_or_else(PoisonError::into_inner);
        for port in &self.ports {
            in_use.remove(port);
        }
    }
}
