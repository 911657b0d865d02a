//! Consistent hashing for routing by key (rendezvous, or highest random weight, hashing):
//! each key goes to the member whose hash with it is highest. A member that joins takes
//! about 1/N of the keys, all from the others in equal shares; a member that leaves gives
//! up only its own keys; no virtual nodes are needed for an even spread.

/// A set of members, each known by its endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ring {
    members: Vec<(String, u64)>,
}

/// FNV-1a, then a final mix: cheap on 16-byte trace IDs and well spread.
fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// splitmix64's finaliser.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Ring {
    /// A ring of `endpoints` (duplicates count once; the order does not matter).
    pub fn new<S: AsRef<str>>(endpoints: &[S]) -> Ring {
        let mut members: Vec<(String, u64)> = endpoints.iter().map(|e| (e.as_ref().to_string(), hash(e.as_ref().as_bytes()))).collect();
        members.sort();
        members.dedup();
        Ring { members }
    }

    /// The members, sorted.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(e, _)| e.as_str())
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The index (in [`Ring::endpoints`] order) of the member `key` goes to; `None` on an
    /// empty ring.
    pub fn pick(&self, key: &[u8]) -> Option<usize> {
        let k = hash(key);
        (0..self.members.len()).max_by_key(|&i| (mix(k ^ self.members[i].1), std::cmp::Reverse(i)))
    }

    /// The endpoint `key` goes to.
    pub fn endpoint(&self, key: &[u8]) -> Option<&str> {
        self.pick(key).map(|i| self.members[i].0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace_ids(n: usize) -> Vec<[u8; 16]> {
        // A fixed pseudo-random sequence: the same IDs every run.
        let mut x = 0x1234_5678_9abc_def0u64;
        (0..n)
            .map(|_| {
                let mut id = [0u8; 16];
                for half in id.chunks_mut(8) {
                    x = mix(x.wrapping_add(0x9e37_79b9_7f4a_7c15));
                    half.copy_from_slice(&x.to_le_bytes());
                }
                id
            })
            .collect()
    }

    fn endpoints(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("http://tier2-{i}.weir.svc:4317")).collect()
    }

    #[test]
    fn random_trace_ids_spread_within_ten_percent_of_even() {
        let ids = trace_ids(200_000);
        for n in [3, 10] {
            let ring = Ring::new(&endpoints(n));
            let mut counts = vec![0usize; n];
            for id in &ids {
                counts[ring.pick(id).unwrap()] += 1;
            }
            let even = ids.len() as f64 / n as f64;
            for (i, &c) in counts.iter().enumerate() {
                let off = (c as f64 - even).abs() / even;
                assert!(off <= 0.10, "{n} members: member {i} has {c} keys, {:.1}% off even", off * 100.0);
            }
        }
    }

    #[test]
    fn a_member_joining_takes_about_one_nth_and_one_leaving_gives_up_only_its_own() {
        let ids = trace_ids(100_000);
        let three = Ring::new(&endpoints(3));
        let four = Ring::new(&endpoints(4));
        let moved: Vec<_> = ids.iter().filter(|id| three.endpoint(id.as_slice()) != four.endpoint(id.as_slice())).collect();
        let share = moved.len() as f64 / ids.len() as f64;
        assert!((0.22..=0.28).contains(&share), "{:.1}% moved when a fourth joined", share * 100.0);
        let newcomer = endpoints(4).pop().unwrap();
        assert!(moved.iter().all(|id| four.endpoint(id.as_slice()) == Some(newcomer.as_str())), "keys move only to the newcomer");
        // The third leaves: only its keys move.
        let two = Ring::new(&endpoints(2));
        for id in &ids {
            let before = three.endpoint(id).unwrap();
            if before != endpoints(3)[2] {
                assert_eq!(two.endpoint(id), Some(before), "a key of a member that stayed moved");
            }
        }
    }

    #[test]
    fn order_and_duplicates_do_not_matter_and_an_empty_ring_picks_nothing() {
        let a = Ring::new(&["http://b:4317", "http://a:4317", "http://b:4317"]);
        let b = Ring::new(&["http://a:4317", "http://b:4317"]);
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        assert_eq!(Ring::new::<&str>(&[]).pick(b"x"), None);
    }
}
