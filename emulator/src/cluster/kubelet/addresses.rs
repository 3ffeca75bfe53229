//! Pod addresses: each node hands out the addresses of its pod CIDR (what kind's
//! kube-controller-manager gives node `i`: `10.244.i.0/24`, set in the Node's
//! `spec.podCIDR`), one per pod from when its sandbox exists (after its claims are
//! prepared) until the pod is gone, as a CNI plugin's IPAM does. Nothing listens on them:
//! the containers share the host's network. Pods with `hostNetwork` have the node's address.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// The addresses of one node's pod CIDR (a /24) and who holds which.
#[derive(Debug, Clone)]
pub struct PodAddresses {
    subnet: Option<[u8; 3]>,
    held: BTreeMap<String, Ipv4Addr>,
}

impl PodAddresses {
    /// For `10.244.<index>.0/24`; none when the index does not fit an octet.
    pub fn for_node_index(index: usize) -> Self {
        Self {
            subnet: u8::try_from(index).ok().map(|i| [10, 244, i]),
            held: BTreeMap::new(),
        }
    }

    /// The pod CIDR as the Node's `spec.podCIDR` writes it.
    pub fn cidr(&self) -> Option<String> {
        self.subnet.map(|[a, b, c]| format!("{a}.{b}.{c}.0/24"))
    }

    /// The address of pod `uid`: the one it holds, else the lowest free one (.1 is the
    /// node's bridge, as with kind's CNI); `None` when the range is exhausted.
    pub fn assign(&mut self, uid: &str) -> Option<Ipv4Addr> {
        if let Some(ip) = self.held.get(uid) {
            return Some(*ip);
        }
        let [a, b, c] = self.subnet?;
        let ip = (2..=254)
            .map(|d| Ipv4Addr::new(a, b, c, d))
            .find(|ip| !self.held.values().any(|held| held == ip))?;
        self.held.insert(uid.to_string(), ip);
        Some(ip)
    }

    pub fn release(&mut self, uid: &str) {
        self.held.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_reused_once_released() {
        let mut pool = PodAddresses::for_node_index(1);
        assert_eq!(pool.cidr().as_deref(), Some("10.244.1.0/24"));
        assert_eq!(pool.assign("a"), Some(Ipv4Addr::new(10, 244, 1, 2)));
        assert_eq!(pool.assign("b"), Some(Ipv4Addr::new(10, 244, 1, 3)));
        assert_eq!(pool.assign("a"), Some(Ipv4Addr::new(10, 244, 1, 2)));
        pool.release("a");
        assert_eq!(pool.assign("c"), Some(Ipv4Addr::new(10, 244, 1, 2)));
        assert_eq!(PodAddresses::for_node_index(300).assign("x"), None);
    }
}
