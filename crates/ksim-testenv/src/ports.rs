//! Free loopback ports. Components need their ports on the command line, so a port is found
//! by binding port 0 and released for the component to take.

use std::{
    collections::HashSet,
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

#[cfg(test)]
mod tests {
    use super::free_port;

    #[test]
    fn ports_are_not_handed_out_twice() {
        let ports: std::collections::HashSet<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        assert_eq!(ports.len(), 50);
    }
}
