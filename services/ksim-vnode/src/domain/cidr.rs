//! Address management: per-node pod CIDRs carved from the pool CIDR, and pod IPs inside one
//! node's CIDR. Both keep their free space as ranges, so a /8 pool of /24 subnets or a large node
//! CIDR costs memory in proportion to its fragmentation, not its size.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use thiserror::Error;

/// Longest node prefix accepted: a /30 leaves one pod address beside the node's own.
pub const MAX_NODE_PREFIX_LEN: u8 = 30;

/// Why an address could not be allocated, claimed or configured.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CidrError {
    #[error(
        "node prefix /{node_prefix_len} does not fit pool {pool}: it must be longer than /{} and at most /{MAX_NODE_PREFIX_LEN}",
        pool.prefix_len()
    )]
    InvalidNodePrefix { pool: Ipv4Net, node_prefix_len: u8 },
    /// Every slot of `cidr` is taken: node subnets of the pool, or pod addresses of a node.
    #[error("{cidr} is exhausted: all {count} {unit} are in use")]
    Exhausted {
        cidr: Ipv4Net,
        count: u64,
        unit: &'static str,
    },
    #[error("{net} is not inside the pod CIDR pool {pool}")]
    NotInPool { net: Ipv4Net, pool: Ipv4Net },
    #[error("{net} has prefix /{}, but node subnets of this pool are /{expected}", net.prefix_len())]
    WrongPrefixLength { net: Ipv4Net, expected: u8 },
    #[error("{net} is not aligned: its network address is {}", net.network())]
    Misaligned { net: Ipv4Net },
    #[error("{net} is already allocated to another node")]
    SubnetTaken { net: Ipv4Net },
    #[error("{ip} is not inside node CIDR {cidr}")]
    NotInNodeCidr { ip: Ipv4Addr, cidr: Ipv4Net },
    #[error("{ip} is the {role} of node CIDR {cidr}, not a pod address")]
    ReservedAddress {
        ip: Ipv4Addr,
        cidr: Ipv4Net,
        role: &'static str,
    },
    #[error("{ip} is already allocated to another pod")]
    AddressTaken { ip: Ipv4Addr },
}

/// Free slots of `0..len` as disjoint half-open ranges (start -> end), so finding, taking and
/// returning a slot are O(log fragments).
#[derive(Clone, Debug)]
struct FreeSlots {
    ranges: BTreeMap<u64, u64>,
    len: u64,
    taken: u64,
}

impl FreeSlots {
    fn new(start: u64, end: u64) -> Self {
        let mut ranges = BTreeMap::new();
        if start < end {
            ranges.insert(start, end);
        }
        FreeSlots {
            ranges,
            len: end.saturating_sub(start),
            taken: 0,
        }
    }

    fn is_free(&self, slot: u64) -> bool {
        self.ranges
            .range(..=slot)
            .next_back()
            .is_some_and(|(_, &end)| slot < end)
    }

    /// The lowest free slot at or after `from`, wrapping to the lowest overall.
    fn first_free_from(&self, from: u64) -> Option<u64> {
        if self.is_free(from) {
            return Some(from);
        }
        self.ranges
            .range(from..)
            .next()
            .or_else(|| self.ranges.iter().next())
            .map(|(&start, _)| start)
    }

    /// Marks a free slot taken; false if it was not free.
    fn take(&mut self, slot: u64) -> bool {
        let Some((&start, &end)) = self.ranges.range(..=slot).next_back() else {
            return false;
        };
        if slot >= end {
            return false;
        }
        self.ranges.remove(&start);
        if start < slot {
            self.ranges.insert(start, slot);
        }
        if slot + 1 < end {
            self.ranges.insert(slot + 1, end);
        }
        self.taken += 1;
        true
    }

    /// Returns a taken slot, merging it with free neighbours; false if it was already free.
    fn give_back(&mut self, slot: u64) -> bool {
        if self.is_free(slot) {
            return false;
        }
        let mut start = slot;
        let mut end = slot + 1;
        if let Some((&before_start, &before_end)) = self.ranges.range(..slot).next_back()
            && before_end == slot
        {
            self.ranges.remove(&before_start);
            start = before_start;
        }
        if let Some(after_end) = self.ranges.remove(&end) {
            end = after_end;
        }
        self.ranges.insert(start, end);
        self.taken -= 1;
        true
    }
}

/// Hands out fixed-size node subnets (`spec.podCIDR`) from the pool CIDR, lowest first.
#[derive(Clone, Debug)]
pub struct PodCidrPool {
    pool: Ipv4Net,
    node_prefix_len: u8,
    free: FreeSlots,
}

impl PodCidrPool {
    pub fn new(pool: Ipv4Net, node_prefix_len: u8) -> Result<Self, CidrError> {
        let pool = pool.trunc();
        if node_prefix_len <= pool.prefix_len() || node_prefix_len > MAX_NODE_PREFIX_LEN {
            return Err(CidrError::InvalidNodePrefix {
                pool,
                node_prefix_len,
            });
        }
        let subnet_count = 1u64 << (node_prefix_len - pool.prefix_len());
        Ok(PodCidrPool {
            pool,
            node_prefix_len,
            free: FreeSlots::new(0, subnet_count),
        })
    }

    pub fn pool(&self) -> Ipv4Net {
        self.pool
    }

    pub fn node_prefix_len(&self) -> u8 {
        self.node_prefix_len
    }

    /// The lowest free node subnet.
    pub fn allocate(&mut self) -> Result<Ipv4Net, CidrError> {
        let exhausted = || CidrError::Exhausted {
            cidr: self.pool,
            count: self.free.len,
            unit: "node subnets",
        };
        let index = self.free.first_free_from(0).ok_or_else(exhausted)?;
        self.free.take(index);
        Ok(self.subnet(index))
    }

    /// Records a subnet already used by an existing node, e.g. when adopting nodes after a
    /// restart.
    pub fn claim(&mut self, net: Ipv4Net) -> Result<(), CidrError> {
        let index = self.index_of(net)?;
        if self.free.take(index) {
            Ok(())
        } else {
            Err(CidrError::SubnetTaken { net })
        }
    }

    /// Frees a subnet; false if it was not allocated from this pool.
    pub fn release(&mut self, net: Ipv4Net) -> bool {
        self.index_of(net)
            .is_ok_and(|index| self.free.give_back(index))
    }

    /// How many node subnets the pool holds.
    pub fn capacity(&self) -> usize {
        usize::try_from(self.free.len).unwrap_or(usize::MAX)
    }

    pub fn in_use(&self) -> usize {
        usize::try_from(self.free.taken).unwrap_or(usize::MAX)
    }

    pub fn available(&self) -> usize {
        self.capacity() - self.in_use()
    }

    fn subnet_size(&self) -> u64 {
        1u64 << (32 - self.node_prefix_len)
    }

    fn subnet(&self, index: u64) -> Ipv4Net {
        let network = u64::from(u32::from(self.pool.network())) + index * self.subnet_size();
        // In range by construction: index < subnet count, so the subnet lies inside the pool.
        let network = Ipv4Addr::from(u32::try_from(network).unwrap_or(u32::MAX));
        Ipv4Net::new(network, self.node_prefix_len).unwrap_or(self.pool)
    }

    fn index_of(&self, net: Ipv4Net) -> Result<u64, CidrError> {
        if !self.pool.contains(&net) {
            return Err(CidrError::NotInPool {
                net,
                pool: self.pool,
            });
        }
        if net.prefix_len() != self.node_prefix_len {
            return Err(CidrError::WrongPrefixLength {
                net,
                expected: self.node_prefix_len,
            });
        }
        if net.addr() != net.network() {
            return Err(CidrError::Misaligned { net });
        }
        let offset = u32::from(net.network()) - u32::from(self.pool.network());
        Ok(u64::from(offset) / self.subnet_size())
    }
}

/// Offsets inside a node CIDR that are not pod addresses.
const NETWORK_OFFSET: u64 = 0;
const NODE_OFFSET: u64 = 1;

/// Pod IPs inside one node's CIDR. The first host address is the node's own (host-network pods
/// share it); the others, up to but excluding the broadcast address, go to pods.
#[derive(Clone, Debug)]
pub struct NodeIpam {
    cidr: Ipv4Net,
    free: FreeSlots,
    /// Offset after the last address handed out: allocation continues from here, so an address
    /// just released is not given to the next pod at once (as CNI host-local does), which would
    /// let a stale endpoint reach the wrong pod.
    cursor: u64,
}

impl NodeIpam {
    /// `cidr` is truncated to its network. A /31 or /32 has no pod addresses.
    pub fn new(cidr: Ipv4Net) -> Self {
        let cidr = cidr.trunc();
        let size = 1u64 << (32 - cidr.prefix_len());
        let first_pod = NODE_OFFSET + 1;
        let broadcast = size - 1;
        NodeIpam {
            cidr,
            free: FreeSlots::new(first_pod, broadcast.max(first_pod)),
            cursor: first_pod,
        }
    }

    pub fn cidr(&self) -> Ipv4Net {
        self.cidr
    }

    /// The node's InternalIP: the first host address of its CIDR.
    pub fn node_ip(&self) -> Ipv4Addr {
        self.address(NODE_OFFSET)
    }

    /// The next free pod address after the last one handed out, wrapping around.
    pub fn allocate(&mut self) -> Result<Ipv4Addr, CidrError> {
        let offset = self
            .free
            .first_free_from(self.cursor)
            .ok_or(CidrError::Exhausted {
                cidr: self.cidr,
                count: self.free.len,
                unit: "pod addresses",
            })?;
        self.free.take(offset);
        self.cursor = offset + 1;
        Ok(self.address(offset))
    }

    /// Records an address already used by a pod, e.g. when rebuilding allocations from pods
    /// after a restart.
    pub fn claim(&mut self, ip: Ipv4Addr) -> Result<(), CidrError> {
        let offset = self.pod_offset(ip)?;
        if self.free.take(offset) {
            Ok(())
        } else {
            Err(CidrError::AddressTaken { ip })
        }
    }

    /// Frees a pod address; false if it was not allocated here.
    pub fn release(&mut self, ip: Ipv4Addr) -> bool {
        self.pod_offset(ip)
            .is_ok_and(|offset| self.free.give_back(offset))
    }

    /// Whether `ip` is one of this CIDR's pod addresses (not the network, node or broadcast
    /// address), allocated or not.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.pod_offset(ip).is_ok()
    }

    /// Whether `ip` is currently allocated to a pod.
    pub fn is_allocated(&self, ip: Ipv4Addr) -> bool {
        self.pod_offset(ip)
            .is_ok_and(|offset| !self.free.is_free(offset))
    }

    pub fn in_use(&self) -> usize {
        usize::try_from(self.free.taken).unwrap_or(usize::MAX)
    }

    /// How many pod addresses the CIDR holds.
    pub fn capacity(&self) -> usize {
        usize::try_from(self.free.len).unwrap_or(usize::MAX)
    }

    fn address(&self, offset: u64) -> Ipv4Addr {
        let base = u64::from(u32::from(self.cidr.network()));
        Ipv4Addr::from(u32::try_from(base + offset).unwrap_or(u32::MAX))
    }

    fn pod_offset(&self, ip: Ipv4Addr) -> Result<u64, CidrError> {
        if !self.cidr.contains(&ip) {
            return Err(CidrError::NotInNodeCidr {
                ip,
                cidr: self.cidr,
            });
        }
        let offset = u64::from(u32::from(ip) - u32::from(self.cidr.network()));
        let reserved = |role| CidrError::ReservedAddress {
            ip,
            cidr: self.cidr,
            role,
        };
        match offset {
            NETWORK_OFFSET => Err(reserved("network address")),
            NODE_OFFSET => Err(reserved("node address")),
            _ if ip == self.cidr.broadcast() => Err(reserved("broadcast address")),
            _ => Ok(offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn pool_rejects_node_prefixes_that_do_not_fit() {
        for bad in [16, 12, 31, 32] {
            let error = PodCidrPool::new(net("10.0.0.0/16"), bad).unwrap_err();
            assert_eq!(
                error,
                CidrError::InvalidNodePrefix {
                    pool: net("10.0.0.0/16"),
                    node_prefix_len: bad
                }
            );
            assert!(error.to_string().contains("10.0.0.0/16"), "{error}");
        }
        assert!(PodCidrPool::new(net("10.0.0.0/16"), 17).is_ok());
        assert!(PodCidrPool::new(net("10.0.0.0/16"), 30).is_ok());
    }

    #[test]
    fn pool_allocates_lowest_subnets_in_order() {
        let mut pool = PodCidrPool::new(net("10.244.0.0/16"), 24).unwrap();
        assert_eq!(pool.capacity(), 256);
        assert_eq!(pool.allocate().unwrap(), net("10.244.0.0/24"));
        assert_eq!(pool.allocate().unwrap(), net("10.244.1.0/24"));
        assert_eq!(pool.allocate().unwrap(), net("10.244.2.0/24"));
        assert_eq!(pool.in_use(), 3);
        assert_eq!(pool.available(), 253);
    }

    #[test]
    fn pool_is_normalised_to_its_network() {
        let mut pool = PodCidrPool::new(net("10.244.3.7/16"), 24).unwrap();
        assert_eq!(pool.pool(), net("10.244.0.0/16"));
        assert_eq!(pool.allocate().unwrap(), net("10.244.0.0/24"));
    }

    #[test]
    fn pool_exhausts_at_exactly_its_capacity() {
        let mut pool = PodCidrPool::new(net("192.168.0.0/22"), 26).unwrap();
        assert_eq!(pool.capacity(), 16);
        let subnets: BTreeSet<Ipv4Net> = (0..16).map(|_| pool.allocate().unwrap()).collect();
        assert_eq!(subnets.len(), 16);
        assert!(subnets.iter().all(|s| net("192.168.0.0/22").contains(s)));
        let error = pool.allocate().unwrap_err();
        assert_eq!(
            error,
            CidrError::Exhausted {
                cidr: net("192.168.0.0/22"),
                count: 16,
                unit: "node subnets"
            }
        );
        assert_eq!(
            error.to_string(),
            "192.168.0.0/22 is exhausted: all 16 node subnets are in use"
        );
        assert_eq!(pool.available(), 0);
    }

    #[test]
    fn released_subnet_is_reused_lowest_first() {
        let mut pool = PodCidrPool::new(net("10.0.0.0/16"), 24).unwrap();
        for _ in 0..5 {
            pool.allocate().unwrap();
        }
        assert!(pool.release(net("10.0.3.0/24")));
        assert!(pool.release(net("10.0.1.0/24")));
        assert!(!pool.release(net("10.0.1.0/24")), "double release");
        assert!(!pool.release(net("10.0.9.0/24")), "never allocated");
        assert!(!pool.release(net("172.16.0.0/24")), "outside the pool");
        assert_eq!(pool.in_use(), 3);
        assert_eq!(pool.allocate().unwrap(), net("10.0.1.0/24"));
        assert_eq!(pool.allocate().unwrap(), net("10.0.3.0/24"));
        assert_eq!(pool.allocate().unwrap(), net("10.0.5.0/24"));
    }

    #[test]
    fn claim_adopts_existing_subnets_and_allocation_skips_them() {
        let mut pool = PodCidrPool::new(net("10.0.0.0/16"), 24).unwrap();
        pool.claim(net("10.0.0.0/24")).unwrap();
        pool.claim(net("10.0.2.0/24")).unwrap();
        assert_eq!(pool.in_use(), 2);
        assert_eq!(pool.allocate().unwrap(), net("10.0.1.0/24"));
        assert_eq!(pool.allocate().unwrap(), net("10.0.3.0/24"));
    }

    #[test]
    fn claim_errors_are_distinct() {
        let mut pool = PodCidrPool::new(net("10.0.0.0/16"), 24).unwrap();
        assert_eq!(
            pool.claim(net("10.1.0.0/24")),
            Err(CidrError::NotInPool {
                net: net("10.1.0.0/24"),
                pool: net("10.0.0.0/16")
            })
        );
        assert_eq!(
            pool.claim(net("10.0.0.0/25")),
            Err(CidrError::WrongPrefixLength {
                net: net("10.0.0.0/25"),
                expected: 24
            })
        );
        let misaligned = net("10.0.4.128/24");
        let error = pool.claim(misaligned).unwrap_err();
        assert_eq!(error, CidrError::Misaligned { net: misaligned });
        assert!(error.to_string().contains("10.0.4.0"), "{error}");
        pool.claim(net("10.0.4.0/24")).unwrap();
        assert_eq!(
            pool.claim(net("10.0.4.0/24")),
            Err(CidrError::SubnetTaken {
                net: net("10.0.4.0/24")
            })
        );
        assert_eq!(pool.in_use(), 1, "failed claims must not take anything");
    }

    #[test]
    fn slash_8_pool_of_slash_24_nodes_is_cheap_and_exact() {
        let mut pool = PodCidrPool::new(net("10.0.0.0/8"), 24).unwrap();
        assert_eq!(pool.capacity(), 65_536);
        for _ in 0..65_536 {
            pool.allocate().unwrap();
        }
        assert!(matches!(
            pool.allocate(),
            Err(CidrError::Exhausted { count: 65_536, .. })
        ));
        // Fully allocated: no free ranges left at all.
        assert!(pool.free.ranges.is_empty());
        assert!(pool.release(net("10.255.255.0/24")));
        assert!(pool.release(net("10.128.0.0/24")));
        assert_eq!(pool.allocate().unwrap(), net("10.128.0.0/24"));
        assert_eq!(pool.allocate().unwrap(), net("10.255.255.0/24"));
    }

    #[test]
    fn releases_merge_back_into_one_range() {
        let mut pool = PodCidrPool::new(net("10.0.0.0/24"), 28).unwrap();
        let all: Vec<Ipv4Net> = (0..16).map(|_| pool.allocate().unwrap()).collect();
        // Release in a scattered order; the free space must coalesce to a single range.
        for index in [3, 1, 2, 0, 15, 8, 9, 4, 6, 5, 7, 10, 12, 11, 14, 13] {
            assert!(pool.release(all[index]));
        }
        assert_eq!(pool.in_use(), 0);
        assert_eq!(pool.free.ranges.len(), 1);
        assert_eq!(pool.free.ranges.get(&0), Some(&16));
    }

    #[test]
    fn node_ipam_reserves_network_node_and_broadcast() {
        let mut ipam = NodeIpam::new(net("10.244.1.0/29"));
        assert_eq!(ipam.node_ip(), ip("10.244.1.1"));
        assert_eq!(ipam.capacity(), 5);
        let given: Vec<Ipv4Addr> = (0..5).map(|_| ipam.allocate().unwrap()).collect();
        assert_eq!(
            given,
            [
                "10.244.1.2",
                "10.244.1.3",
                "10.244.1.4",
                "10.244.1.5",
                "10.244.1.6"
            ]
            .map(ip)
            .to_vec()
        );
        let error = ipam.allocate().unwrap_err();
        assert_eq!(
            error,
            CidrError::Exhausted {
                cidr: net("10.244.1.0/29"),
                count: 5,
                unit: "pod addresses"
            }
        );
        assert!(error.to_string().contains("10.244.1.0/29"), "{error}");
        assert_eq!(ipam.in_use(), 5);
    }

    #[test]
    fn slash_24_node_gives_253_pod_addresses() {
        let mut ipam = NodeIpam::new(net("10.244.7.0/24"));
        assert_eq!(ipam.capacity(), 253);
        let given: BTreeSet<Ipv4Addr> = (0..253).map(|_| ipam.allocate().unwrap()).collect();
        assert_eq!(given.len(), 253);
        for reserved in ["10.244.7.0", "10.244.7.1", "10.244.7.255"] {
            assert!(!given.contains(&ip(reserved)), "{reserved} handed out");
        }
        assert!(ipam.allocate().is_err());
    }

    #[test]
    fn node_ipam_round_robin_does_not_reuse_a_freed_address_at_once() {
        let mut ipam = NodeIpam::new(net("10.0.0.0/29"));
        let first = ipam.allocate().unwrap();
        let second = ipam.allocate().unwrap();
        assert!(ipam.release(first));
        assert_eq!(ipam.allocate().unwrap(), ip("10.0.0.4"));
        assert!(ipam.release(second));
        assert_eq!(ipam.allocate().unwrap(), ip("10.0.0.5"));
        assert_eq!(ipam.allocate().unwrap(), ip("10.0.0.6"));
        // End of the range reached: wrap around to the oldest freed addresses.
        assert_eq!(ipam.allocate().unwrap(), first);
        assert_eq!(ipam.allocate().unwrap(), second);
        assert!(ipam.allocate().is_err());
    }

    #[test]
    fn node_ipam_claim_checks_membership_roles_and_ownership() {
        let mut ipam = NodeIpam::new(net("10.0.1.0/24"));
        assert_eq!(
            ipam.claim(ip("10.0.2.5")),
            Err(CidrError::NotInNodeCidr {
                ip: ip("10.0.2.5"),
                cidr: net("10.0.1.0/24")
            })
        );
        for (reserved, role) in [
            ("10.0.1.0", "network address"),
            ("10.0.1.1", "node address"),
            ("10.0.1.255", "broadcast address"),
        ] {
            let error = ipam.claim(ip(reserved)).unwrap_err();
            assert_eq!(
                error,
                CidrError::ReservedAddress {
                    ip: ip(reserved),
                    cidr: net("10.0.1.0/24"),
                    role
                }
            );
            assert!(error.to_string().contains(role));
        }
        ipam.claim(ip("10.0.1.2")).unwrap();
        assert_eq!(
            ipam.claim(ip("10.0.1.2")),
            Err(CidrError::AddressTaken { ip: ip("10.0.1.2") })
        );
        assert_eq!(ipam.in_use(), 1);
        assert!(ipam.is_allocated(ip("10.0.1.2")));
        assert_eq!(
            ipam.allocate().unwrap(),
            ip("10.0.1.3"),
            "claimed address skipped"
        );
    }

    #[test]
    fn node_ipam_contains_and_release_only_pod_addresses() {
        let mut ipam = NodeIpam::new(net("10.0.1.0/24"));
        let given = ipam.allocate().unwrap();
        assert!(ipam.is_allocated(given));
        assert!(!ipam.is_allocated(ip("10.0.1.50")));
        assert!(!ipam.is_allocated(ipam.node_ip()));
        // Membership of the pod range, whether allocated or not.
        assert!(ipam.contains(given));
        assert!(ipam.contains(ip("10.0.1.50")));
        assert!(ipam.contains(ip("10.0.1.254")));
        for outside in ["10.0.1.0", "10.0.1.1", "10.0.1.255", "10.0.2.5"] {
            assert!(!ipam.contains(ip(outside)), "{outside}");
        }
        assert!(!ipam.release(ipam.node_ip()));
        assert!(!ipam.release(ip("10.0.1.50")));
        assert!(ipam.release(given));
        assert!(!ipam.is_allocated(given));
        assert_eq!(ipam.in_use(), 0);
    }

    #[test]
    fn smallest_node_cidrs() {
        let mut slash30 = NodeIpam::new(net("10.0.0.4/30"));
        assert_eq!(slash30.node_ip(), ip("10.0.0.5"));
        assert_eq!(slash30.capacity(), 1);
        assert_eq!(slash30.allocate().unwrap(), ip("10.0.0.6"));
        assert!(slash30.allocate().is_err());

        let mut slash32 = NodeIpam::new(net("10.0.0.9/32"));
        assert_eq!(slash32.capacity(), 0);
        assert!(slash32.allocate().is_err());
        assert!(slash32.claim(ip("10.0.0.9")).is_err());
    }

    #[test]
    fn node_ipam_claims_rebuild_state_after_restart() {
        let mut before = NodeIpam::new(net("10.0.3.0/26"));
        let used: Vec<Ipv4Addr> = (0..10).map(|_| before.allocate().unwrap()).collect();
        let mut after = NodeIpam::new(net("10.0.3.0/26"));
        for address in &used {
            after.claim(*address).unwrap();
        }
        assert_eq!(after.in_use(), 10);
        let fresh = after.allocate().unwrap();
        assert!(!used.contains(&fresh));
    }
}
