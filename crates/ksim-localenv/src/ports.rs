//! Free loopback ports. Components need their ports on the command line, so a port is found
//! by binding port 0 and released for the component to take. A range of ports a component
//! binds later, one at a time, comes from below the ephemeral range ([`free_port_range`]).

use std::{
    collections::HashSet,
    io,
    net::{Ipv4Addr, TcpListener},
    sync::{LazyLock, Mutex},
};

use crate::Error;

// Ports handed out in this process are never handed out again, so environments started in
// parallel by one test binary cannot collide with each other.
static HANDED_OUT: LazyLock<Mutex<HashSet<u16>>> = LazyLock::new(Default::default);

pub fn free_port() -> Result<u16, Error> {
    loop {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .map_err(Error::NoFreePort)?
            .port();
        let mut handed_out = HANDED_OUT
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
}

/// Where [`free_port_range`] looks: from here to the ephemeral range's start.
const RANGE_FLOOR: u16 = 20_000;
/// Linux's default first ephemeral port, when `/proc` does not say.
const EPHEMERAL_START: u16 = 32_768;

/// `len` consecutive loopback ports, each free now and none handed out before: `(first,
/// last)`. Below the ephemeral range, since a component binds these later and one at a time:
/// a port there can be taken meanwhile by any outgoing connection's local end and held as long
/// as that connection lives (a kubelet endpoint test saw its listener refused for minutes).
pub fn free_port_range(len: u16) -> Result<(u16, u16), Error> {
    let none = |what: &str| Error::NoFreePort(io::Error::new(io::ErrorKind::AddrInUse, what));
    let len = len.max(1);
    let ceiling = ephemeral_start().saturating_sub(len);
    if ceiling <= RANGE_FLOOR {
        return Err(none("the ephemeral range leaves no room below it"));
    }
    // Test binaries run in parallel: each process starts at its own place.
    let span = u32::from(ceiling - RANGE_FLOOR);
    let slots = span / u32::from(len);
    let start_slot = std::process::id() % slots.max(1);
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for slot in (start_slot..slots).chain(0..start_slot) {
        let Ok(first) = u16::try_from(u32::from(RANGE_FLOOR) + slot * u32::from(len)) else {
            continue;
        };
        let ports = first..=first.saturating_add(len - 1);
        if ports.clone().any(|port| handed_out.contains(&port)) {
            continue;
        }
        // All bound at once, then released together.
        let bound: Result<Vec<TcpListener>, _> = ports
            .clone()
            .map(|port| TcpListener::bind((Ipv4Addr::LOCALHOST, port)))
            .collect();
        if bound.is_ok() {
            handed_out.extend(ports.clone());
            return Ok((*ports.start(), *ports.end()));
        }
    }
    Err(none("no free range below the ephemeral ports"))
}

/// The first port the kernel hands out to outgoing connections.
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_START)
}

#[cfg(test)]
mod tests {
    use super::{free_port, free_port_range};

    #[test]
    fn port_ranges_are_below_the_ephemeral_ports_free_and_never_shared() {
        let (first, last) = free_port_range(16).unwrap();
        assert_eq!(last - first, 15);
        assert!(last < super::ephemeral_start(), "{first}-{last}");
        let (again, _) = free_port_range(16).unwrap();
        assert!(
            again > last || again + 15 < first,
            "{again} overlaps {first}-{last}"
        );
        for port in first..=last {
            std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).unwrap();
        }
    }

    #[test]
    fn ports_are_not_handed_out_twice() {
        let ports: std::collections::HashSet<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        assert_eq!(ports.len(), 50);
    }
}
