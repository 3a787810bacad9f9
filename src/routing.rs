//! Similarity routing: which partition decides a post, and which neighbouring partitions also
//! register it. The dominant block is the fingerprint's leading `ceil(log2 P)` bits: near
//! duplicates agree on few leading bits far more often than on whole 16-bit blocks. A light edit
//! of a short post still flips some of them, so a post whose routing bits are weak (small |V| in
//! the SimHash accumulator, relative to the post's total token weight) is also registered in
//! every partition reachable by flipping weak routing bits.

use serde::{Deserialize, Serialize};

use crate::fingerprint::SimHash;

/// Routing settings (the `[routing]` config section).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    /// A routing bit is weak when |V| of its accumulator is at most this fraction of the post's
    /// total token weight; a post is also registered where flipping its weak bits leads.
    /// 0 disables replication.
    pub replicate_below: f32,
    /// Most partitions a post is registered in besides its own.
    pub max_replicas: usize,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            replicate_below: 0.3,
            max_replicas: 7,
        }
    }
}

/// Where a post goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The partition that decides the post.
    pub primary: u32,
    /// Partitions that only register it (if unique there) so near duplicates routed there find it.
    pub replicas: Vec<u32>,
}

/// Routes fingerprints to `partitions` partitions.
#[derive(Clone, Debug)]
pub struct Router {
    partitions: u32,
    bits: u32,
    cfg: RoutingConfig,
}

impl Router {
    /// A router for `partitions` (at least 1) partitions.
    pub fn new(partitions: u32, cfg: RoutingConfig) -> Router {
        let partitions = partitions.max(1);
        let bits = 32 - (partitions - 1).leading_zeros();
        Router {
            partitions,
            bits,
            cfg,
        }
    }

    /// Number of partitions.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The partition that decides a post: the one its dominant fingerprint bits name. (The
    /// Kafka stages use only this; `route` adds the replicas `eval --partitions` models.)
    pub fn primary(&self, sh: &SimHash) -> u32 {
        self.key(sh) % self.partitions
    }

    /// The routing key: the fingerprint's top `bits` bits (0 with one partition).
    fn key(&self, sh: &SimHash) -> u32 {
        if self.bits == 0 {
            return 0;
        }
        (sh.fingerprint.0 >> (64 - self.bits)) as u32
    }

    /// Routes one post, with the replicas of a post near a partition boundary. `total_weight`
    /// is the sum of its token weights.
    pub fn route(&self, sh: &SimHash, total_weight: f32) -> Route {
        if self.bits == 0 {
            return Route {
                primary: 0,
                replicas: Vec::new(),
            };
        }
        let key = self.key(sh);
        let primary = key % self.partitions;
        let limit = self.cfg.replicate_below * total_weight;
        let mut weak = Vec::new();
        for j in 0..self.bits {
            // Bit j of the key is fingerprint bit 64 - bits + j.
            let bit = (64 - self.bits + j) as usize;
            if total_weight > 0.0 && sh.acc[bit].abs() <= limit {
                weak.push(j);
            }
        }
        let mut replicas = Vec::new();
        for mask in 1u32..(1 << weak.len()) {
            let flip = weak
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .fold(0u32, |m, (_, j)| m | (1 << j));
            let p = (key ^ flip) % self.partitions;
            if p != primary && !replicas.contains(&p) {
                replicas.push(p);
            }
            if replicas.len() >= self.cfg.max_replicas {
                break;
            }
        }
        Route { primary, replicas }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Fingerprint;
    use proptest::prelude::*;

    fn sh(fp: u64, strength: f32) -> SimHash {
        let mut acc = [strength; 64];
        for (i, a) in acc.iter_mut().enumerate() {
            if fp >> i & 1 == 0 {
                *a = -*a;
            }
        }
        SimHash {
            fingerprint: Fingerprint(fp),
            acc,
        }
    }

    #[test]
    fn leading_bits_pick_the_partition() {
        let r = Router::new(
            8,
            RoutingConfig {
                replicate_below: 0.0,
                max_replicas: 7,
            },
        );
        assert_eq!(r.route(&sh(0b101 << 61, 5.0), 10.0).primary, 0b101);
        assert!(r.route(&sh(0b101 << 61, 5.0), 10.0).replicas.is_empty());
    }

    #[test]
    fn weak_bits_replicate_to_neighbours() {
        let r = Router::new(
            8,
            RoutingConfig {
                replicate_below: 0.3,
                max_replicas: 7,
            },
        );
        let mut s = sh(0, 5.0);
        s.acc[63] = -1.0; // the top bit is weak: flipping it leads to partition 4
        let route = r.route(&s, 10.0);
        assert_eq!(route.primary, 0);
        assert_eq!(route.replicas, vec![4]);
    }

    #[test]
    fn single_partition_never_replicates() {
        let r = Router::new(1, RoutingConfig::default());
        assert_eq!(
            r.route(&sh(u64::MAX, 0.0), 1.0),
            Route {
                primary: 0,
                replicas: vec![]
            }
        );
    }

    proptest! {
        #[test]
        fn routing_is_total_and_stable(fp: u64, p in 1u32..64, strength in 0.0f32..3.0) {
            let r = Router::new(p, RoutingConfig::default());
            let a = r.route(&sh(fp, strength), 4.0);
            let b = r.route(&sh(fp, strength), 4.0);
            prop_assert!(a.primary < p);
            prop_assert_eq!(r.primary(&sh(fp, strength)), a.primary);
            prop_assert!(a.replicas.iter().all(|x| *x < p && *x != a.primary));
            prop_assert_eq!(a, b);
        }
    }
}
