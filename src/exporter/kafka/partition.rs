//! Key-to-partition hashes that agree with the other producers of a topic: the Java
//! client's murmur2 and sarama's FNV-1a (docs/configuration.md#kafka).

use crate::config::kafka::Partitioner;

/// Kafka's murmur2, as the Java client's `Utils.murmur2` computes it (the same initial
/// hash value and mixing constants, so that keys land where that client puts them).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate().rev() {
            h ^= u32::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// 32-bit FNV-1a.
pub fn fnv1a(data: &[u8]) -> u32 {
    const OFFSET_BASIS: u32 = 0x811c_9dc5;
    const PRIME: u32 = 16_777_619;
    let mut h = OFFSET_BASIS;
    for &b in data {
        h ^= u32::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// The partition of `key` among `n` (> 0) partitions.
pub fn of_key(partitioner: Partitioner, key: &[u8], n: usize) -> usize {
    let n = n.max(1);
    match partitioner {
        // The Java client: `toPositive(murmur2(key)) % n`.
        Partitioner::Murmur2 => (murmur2(key) & 0x7fff_ffff) as usize % n,
        // sarama: `int32(hash) % n`, negated when negative.
        Partitioner::Fnv1a => ((fnv1a(key) as i32) % n as i32).unsigned_abs() as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_clients_test_vectors() {
        // From the Java client's own tests of `Utils.murmur2`.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), want, "{}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn fnv1a_matches_the_reference_values() {
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn every_key_lands_in_range_and_keys_spread() {
        for p in [Partitioner::Murmur2, Partitioner::Fnv1a] {
            let mut hit = [0usize; 6];
            for i in 0..6000u32 {
                let k = format!("{i:032x}");
                hit[of_key(p, k.as_bytes(), 6)] += 1;
            }
            assert!(hit.iter().all(|&h| h > 700), "{p:?} spreads 6000 keys over 6 partitions: {hit:?}");
        }
    }
}
