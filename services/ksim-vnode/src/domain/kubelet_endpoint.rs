//! Where each virtual node's kubelet endpoint is: the one address the pool advertises for all
//! of them, and a port per node, derived from the node's podCIDR so that it is the same after a
//! restart without being stored anywhere.
//!
//! The address goes into the node's `status.addresses` as its `ExternalIP` (the InternalIP
//! stays the first address of its podCIDR, which nothing can reach), the port into
//! `status.daemonEndpoints.kubeletEndpoint.port`: metrics-server finds it there with
//! `--kubelet-use-node-status-port` and `--kubelet-preferred-address-types=ExternalIP,...`.

use std::{fmt, net::IpAddr, str::FromStr};

use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::{DaemonEndpoint, NodeAddress, NodeDaemonEndpoints, NodeStatus};

use super::labels::KUBELET_PORT;

/// The address type the endpoint is advertised under.
pub const ADDRESS_TYPE: &str = "ExternalIP";

/// An inclusive range of TCP ports, `FIRST-LAST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

/// The default range ends below Linux's default ephemeral range (32768-60999), whose ports an
/// outgoing connection may hold when a node's listener wants it.
impl Default for PortRange {
    fn default() -> Self {
        Self {
            first: 20_000,
            last: 32_767,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortRangeError {
    #[error("{0:?} is not a port range: FIRST-LAST, e.g. 20000-32767")]
    Syntax(String),
    #[error("port range {first}-{last} is empty or starts at port 0")]
    Empty { first: u16, last: u16 },
}

impl FromStr for PortRange {
    type Err = PortRangeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = || PortRangeError::Syntax(text.to_owned());
        let (first, last) = text.trim().split_once('-').ok_or_else(syntax)?;
        let first: u16 = first.trim().parse().map_err(|_| syntax())?;
        let last: u16 = last.trim().parse().map_err(|_| syntax())?;
        if first == 0 || last < first {
            return Err(PortRangeError::Empty { first, last });
        }
        Ok(Self { first, last })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl PortRange {
    pub fn len(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    pub fn is_empty(&self) -> bool {
        self.last < self.first
    }

    /// The port of the node holding `node_cidr`: the range's first port plus the CIDR's slot in
    /// the pool (the pool hands out the lowest free slot, so N nodes take about the first N
    /// ports). `None` when the CIDR is not the pool's or its slot is past the range.
    pub fn port_for(&self, pool: Ipv4Net, node_cidr: Ipv4Net) -> Option<u16> {
        let pool = pool.trunc();
        if !pool.contains(&node_cidr) || node_cidr.prefix_len() <= pool.prefix_len() {
            return None;
        }
        let offset = u32::from(node_cidr.network()) - u32::from(pool.network());
        let slot = offset.checked_shr(32 - u32::from(node_cidr.prefix_len()))?;
        if slot >= self.len() {
            return None;
        }
        u16::try_from(u32::from(self.first) + slot).ok()
    }
}

/// The status fields that advertise a node's kubelet endpoint, from what the node holds now:
/// `endpoint` replaces any ExternalIP and the port; `None` restores the kubelet's default port
/// and drops the ExternalIP. Other addresses are kept in their order. `None` when nothing
/// changes.
pub fn advertised(
    status: Option<&NodeStatus>,
    endpoint: Option<(IpAddr, u16)>,
) -> Option<(Vec<NodeAddress>, NodeDaemonEndpoints)> {
    let current_addresses = status
        .and_then(|status| status.addresses.clone())
        .unwrap_or_default();
    let current_port = status
        .and_then(|status| status.daemon_endpoints.as_ref())
        .and_then(|endpoints| endpoints.kubelet_endpoint.as_ref())
        .map(|endpoint| endpoint.port);
    let mut addresses: Vec<NodeAddress> = current_addresses
        .iter()
        .filter(|address| address.type_ != ADDRESS_TYPE)
        .cloned()
        .collect();
    let port = match endpoint {
        Some((ip, port)) => {
            addresses.push(NodeAddress {
                type_: ADDRESS_TYPE.to_owned(),
                address: ip.to_string(),
            });
            i32::from(port)
        }
        None => KUBELET_PORT,
    };
    if addresses == current_addresses && current_port == Some(port) {
        return None;
    }
    Some((
        addresses,
        NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port }),
        },
    ))
}

/// Writes the endpoint into a status about to be registered.
pub fn advertise(status: &mut NodeStatus, endpoint: Option<(IpAddr, u16)>) {
    if let Some((addresses, endpoints)) = advertised(Some(status), endpoint) {
        status.addresses = Some(addresses);
        status.daemon_endpoints = Some(endpoints);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn net(text: &str) -> Ipv4Net {
        text.parse().unwrap_or_default()
    }

    #[test]
    fn a_port_range_reads_first_dash_last_and_refuses_anything_else() {
        assert_eq!(
            "20000-20009".parse(),
            Ok(PortRange {
                first: 20_000,
                last: 20_009
            })
        );
        assert_eq!("20000-20009".parse::<PortRange>().map(|r| r.len()), Ok(10));
        assert!(matches!(
            "20000".parse::<PortRange>(),
            Err(PortRangeError::Syntax(_))
        ));
        assert!(matches!(
            "20000-70000".parse::<PortRange>(),
            Err(PortRangeError::Syntax(_))
        ));
        assert_eq!(
            "20009-20000".parse::<PortRange>(),
            Err(PortRangeError::Empty {
                first: 20_009,
                last: 20_000
            })
        );
        assert!("0-10".parse::<PortRange>().is_err());
        assert_eq!(PortRange::default().to_string(), "20000-32767");
    }

    #[test]
    fn a_nodes_port_follows_its_podcidrs_slot_in_the_pool() {
        let range = PortRange {
            first: 20_000,
            last: 20_009,
        };
        let pool = net("10.128.0.0/9");
        assert_eq!(range.port_for(pool, net("10.128.0.0/24")), Some(20_000));
        assert_eq!(range.port_for(pool, net("10.128.3.0/24")), Some(20_003));
        assert_eq!(range.port_for(pool, net("10.128.9.0/24")), Some(20_009));
        // Past the range, or not the pool's.
        assert_eq!(range.port_for(pool, net("10.128.10.0/24")), None);
        assert_eq!(range.port_for(pool, net("10.0.0.0/24")), None);
        assert_eq!(range.port_for(pool, pool), None);
        // Another node size: /26 slots.
        assert_eq!(range.port_for(pool, net("10.128.0.192/26")), Some(20_003));
    }

    fn status(addresses: &[(&str, &str)], port: i32) -> NodeStatus {
        NodeStatus {
            addresses: Some(
                addresses
                    .iter()
                    .map(|(type_, address)| NodeAddress {
                        type_: (*type_).to_owned(),
                        address: (*address).to_owned(),
                    })
                    .collect(),
            ),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port }),
            }),
            ..NodeStatus::default()
        }
    }

    #[test]
    fn the_endpoint_is_added_as_external_ip_beside_the_others_and_taken_back() {
        let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
        let mut node = status(
            &[("InternalIP", "10.128.0.1"), ("Hostname", "n1")],
            KUBELET_PORT,
        );
        advertise(&mut node, Some((ip, 20_001)));
        assert_eq!(
            node,
            status(
                &[
                    ("InternalIP", "10.128.0.1"),
                    ("Hostname", "n1"),
                    ("ExternalIP", "192.0.2.7")
                ],
                20_001
            )
        );
        // Already so: nothing to write.
        assert_eq!(advertised(Some(&node), Some((ip, 20_001))), None);
        // Another port after a change of range, then the endpoint turned off.
        let (_, endpoints) = advertised(Some(&node), Some((ip, 21_001))).unwrap_or_default();
        assert_eq!(endpoints.kubelet_endpoint.map(|e| e.port), Some(21_001));
        advertise(&mut node, None);
        assert_eq!(
            node,
            status(
                &[("InternalIP", "10.128.0.1"), ("Hostname", "n1")],
                KUBELET_PORT
            )
        );
        assert_eq!(advertised(Some(&node), None), None);
    }
}
