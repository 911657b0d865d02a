//! The on-disk record: one admitted request, as the bytes it came in.
//!
//! ```text
//! magic u32 "WEIR" | len u32 | crc32 u32 | id u64 | ts_ms u64 | items u32 | signal u8
//! | priority u8 | tenant_len u16 | tenant | payload
//! ```
//!
//! Little-endian. `len` counts everything after the 12-byte head; the CRC-32 covers the
//! same bytes, so a flipped bit anywhere in the meta, the tenant or the payload is caught.
//! The magic lets a reader find the next record after a damaged one.

use crate::signal::Signal;
use bytes::Bytes;

/// "WEIR", little-endian.
pub const MAGIC: u32 = u32::from_le_bytes(*b"WEIR");
/// magic, len, crc.
pub const HEAD: usize = 12;
/// id, ts_ms, items, signal, priority, tenant_len.
pub const META: usize = 24;
/// The largest `len` a reader believes (a larger one is a damaged head).
pub const MAX_LEN: u32 = 1 << 30;

/// A record's fields, without its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Dense, increasing across segments.
    pub id: u64,
    /// Wall clock at append, ms since the Unix epoch (for `max_age`).
    pub ts_ms: u64,
    /// Items in the payload, as counted on arrival.
    pub items: u32,
    /// The signal.
    pub signal: Signal,
    /// 0 sheddable, 1 normal, 2 critical.
    pub priority: u8,
}

/// A record read back.
#[derive(Debug, Clone)]
pub struct Record {
    /// Its fields.
    pub meta: Meta,
    /// The tenant name (empty: none).
    pub tenant: Bytes,
    /// The export request's protobuf bytes.
    pub payload: Bytes,
}

/// A record's parts prepared off the writer thread: everything but the id, with the
/// CRC of the bytes after the id, so the writer only hashes 8 bytes and combines.
#[derive(Debug)]
pub struct Prepared {
    /// The record's fields but its id (the writer gives it).
    pub meta: Meta,
    /// ts_ms .. payload, without the id.
    pub rest_head: [u8; META - 8],
    /// The tenant name.
    pub tenant: Bytes,
    /// The payload.
    pub payload: Bytes,
    /// CRC-32 of `rest_head ++ tenant ++ payload`.
    pub rest_crc: crc32fast::Hasher,
}

impl Prepared {
    /// Prepares a record (the CRC of the payload is computed here, on the caller's core).
    pub fn new(ts_ms: u64, items: u32, signal: Signal, priority: u8, tenant: Bytes, payload: Bytes) -> Self {
        let tenant = if tenant.len() > u16::MAX as usize { tenant.slice(..u16::MAX as usize) } else { tenant };
        let mut rest_head = [0u8; META - 8];
        rest_head[0..8].copy_from_slice(&ts_ms.to_le_bytes());
        rest_head[8..12].copy_from_slice(&items.to_le_bytes());
        rest_head[12] = signal.index() as u8;
        rest_head[13] = priority;
        rest_head[14..16].copy_from_slice(&(tenant.len() as u16).to_le_bytes());
        let mut rest_crc = crc32fast::Hasher::new();
        rest_crc.update(&rest_head);
        rest_crc.update(&tenant);
        rest_crc.update(&payload);
        Prepared { meta: Meta { id: 0, ts_ms, items, signal, priority }, rest_head, tenant, payload, rest_crc }
    }

    /// The record as a reader would read it back, as record `id` (its bytes shared).
    pub fn record(&self, id: u64) -> Record {
        Record { meta: Meta { id, ..self.meta }, tenant: self.tenant.clone(), payload: self.payload.clone() }
    }

    /// Bytes on disk, head included.
    pub fn size(&self) -> u64 {
        (HEAD + META + self.tenant.len() + self.payload.len()) as u64
    }

    /// The 20 bytes before the tenant and payload (head and id), for record `id`.
    pub fn head(&self, id: u64) -> [u8; HEAD + 8] {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&id.to_le_bytes());
        crc.combine(&self.rest_crc);
        let len = (self.size() - HEAD as u64) as u32;
        let mut h = [0u8; HEAD + 8];
        h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        h[4..8].copy_from_slice(&len.to_le_bytes());
        h[8..12].copy_from_slice(&crc.finalize().to_le_bytes());
        h[12..20].copy_from_slice(&id.to_le_bytes());
        h
    }

    /// Appends the whole record to `out` (tests; the writer writes the parts with one
    /// `pwritev`).
    #[cfg(test)]
    pub fn write_to(&self, id: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head(id));
        out.extend_from_slice(&self.rest_head);
        out.extend_from_slice(&self.tenant);
        out.extend_from_slice(&self.payload);
    }
}

/// What a 12-byte head says.
#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    /// A plausible head: `len` bytes follow, to be checked against `crc`.
    Ok {
        /// Bytes after the head.
        len: u32,
        /// Their CRC-32.
        crc: u32,
    },
    /// Not a record head.
    Bad(&'static str),
}

/// Reads a head.
pub fn head(b: &[u8; HEAD]) -> Head {
    let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let crc = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    if magic != MAGIC {
        return Head::Bad("bad magic");
    }
    if (len as usize) < META || len > MAX_LEN {
        return Head::Bad("impossible length");
    }
    Head::Ok { len, crc }
}

/// Checks and splits the `len` bytes after a head.
pub fn body(crc: u32, body: Bytes) -> Result<Record, &'static str> {
    if crc32fast::hash(&body) != crc {
        return Err("checksum mismatch");
    }
    let b = &body[..];
    let id = u64::from_le_bytes(b[0..8].try_into().unwrap_or_default());
    let ts_ms = u64::from_le_bytes(b[8..16].try_into().unwrap_or_default());
    let items = u32::from_le_bytes(b[16..20].try_into().unwrap_or_default());
    let signal = *Signal::ALL.get(b[20] as usize).ok_or("unknown signal")?;
    let priority = b[21];
    let tenant_len = u16::from_le_bytes([b[22], b[23]]) as usize;
    if META + tenant_len > b.len() {
        return Err("tenant longer than the record");
    }
    Ok(Record {
        meta: Meta { id, ts_ms, items, signal, priority },
        tenant: body.slice(META..META + tenant_len),
        payload: body.slice(META + tenant_len..),
    })
}

/// Parses one whole record at the start of `buf`; `Ok(None)` when `buf` ends first.
pub fn parse(buf: &Bytes) -> Result<Option<(Record, usize)>, &'static str> {
    if buf.len() < HEAD {
        return Ok(None);
    }
    let h: &[u8; HEAD] = buf[..HEAD].try_into().map_err(|_| "short head")?;
    match head(h) {
        Head::Bad(why) => Err(why),
        Head::Ok { len, crc } => {
            let end = HEAD + len as usize;
            if buf.len() < end {
                return Ok(None);
            }
            body(crc, buf.slice(HEAD..end)).map(|r| Some((r, end)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64, payload: &'static [u8]) -> Vec<u8> {
        let p = Prepared::new(1_700_000_000_000, 3, Signal::Logs, 2, Bytes::from_static(b"team-a"), Bytes::from_static(payload));
        let mut v = Vec::new();
        p.write_to(id, &mut v);
        assert_eq!(v.len() as u64, p.size());
        v
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let v = Bytes::from(rec(42, b"hello"));
        let (r, used) = parse(&v).unwrap().unwrap();
        assert_eq!(used, v.len());
        assert_eq!(r.meta, Meta { id: 42, ts_ms: 1_700_000_000_000, items: 3, signal: Signal::Logs, priority: 2 });
        assert_eq!(&r.tenant[..], b"team-a");
        assert_eq!(&r.payload[..], b"hello");
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let v = rec(7, b"payload bytes");
        for i in 0..v.len() {
            for bit in 0..8 {
                let mut w = v.clone();
                w[i] ^= 1 << bit;
                match parse(&Bytes::from(w)) {
                    Err(_) | Ok(None) => {}
                    Ok(Some((r, _))) => panic!("byte {i} bit {bit} flipped and still parsed: {r:?}"),
                }
            }
        }
    }

    #[test]
    fn a_short_buffer_is_incomplete_not_corrupt() {
        let v = rec(1, b"0123456789");
        for cut in 0..v.len() {
            assert_eq!(parse(&Bytes::copy_from_slice(&v[..cut])).map(|r| r.is_some()), Ok(false), "cut at {cut}");
        }
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        for seed in 0u64..2000 {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut v: Vec<u8> = (0..64)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            if seed % 2 == 0 {
                v[..4].copy_from_slice(&MAGIC.to_le_bytes());
                v[4..8].copy_from_slice(&(META as u32 + (seed as u32 % 40)).to_le_bytes());
            }
            let _ = parse(&Bytes::from(v));
        }
    }
}
