//! The `aes_gcm` NT: encrypts the inner frame of a tenant's VXLAN packet on one sNIC and decrypts
//! it on another (the VPC case study, paper §6.2), with per-tenant keys and replay protection.
//! The cipher is `ring`'s AES-GCM (AES-NI/VAES), measured fastest to build and near the top in
//! throughput on this kind of machine (DEPENDENCIES.md).
//!
//! Wire format, after the VXLAN header:
//!
//! ```text
//! | SPI (4) | sender (4) | sequence (8) | ciphertext of the inner frame | GCM tag (16) |
//! ```
//!
//! The 16-byte header is the AAD; the nonce is `sender ‖ sequence`. Every encryptor instance
//! draws a random 32-bit sender id from the OS at start and counts its sequence from 1, so two
//! instances sharing a key (scale-out) never reuse a nonce. The decryptor keeps a 64-packet
//! sliding window per (SPI, sender), as IPsec does (RFC 4303 §3.4.3): a sequence at or below the
//! window, or already seen, is dropped before any decryption work; the window moves only after
//! the tag verifies.
//!
//! A decryptor that moves to another node (a chain coming home from a peer) takes its windows
//! with it ([`Nt::save_state`]): a packet it opened there is a replay here too. An encryptor
//! moves nothing: the new instance draws a new sender id, so its nonces are fresh.
//!
//! The header is inserted without moving the payload: the VXLAN header moves 16 bytes into the
//! buffer's headroom and the crypto header takes its old place. Decryption undoes it.

use crate::{Ctx, DropReason, Nt, Pkt, StateError, Verdict};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use snic_core::ids::TenantId;
use snic_core::replay::Window;
use snic_core::time::Instant;
use snic_wire::{layout, vxlan};

/// Bytes the encryptor adds: header and tag.
pub const OVERHEAD: usize = HDR + TAG;
const HDR: usize = 16;
const TAG: usize = 16;

/// Encrypt or decrypt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Seal outgoing packets.
    Encrypt,
    /// Open incoming packets.
    Decrypt,
}

/// One tenant's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantKey {
    /// The tenant this key belongs to.
    pub tenant: u16,
    /// Security parameter index carried on the wire.
    pub spi: u32,
    /// 16 or 32 bytes, hex (AES-128-GCM or AES-256-GCM).
    pub key_hex: String,
}

/// Configuration of an AES-GCM NT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CryptoConfig {
    /// Direction.
    pub direction: Direction,
    /// Keys, one per tenant.
    pub keys: Vec<TenantKey>,
    /// Most (SPI, sender) replay windows kept by a decryptor.
    #[serde(default = "default_senders")]
    pub max_senders: usize,
}

fn default_senders() -> usize {
    1024
}

/// Why a crypto configuration is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoConfigError {
    /// The key is not hex or not 16/32 bytes.
    #[error("key for tenant {tenant} must be 32 or 64 hex digits (AES-128 or AES-256)")]
    BadKey {
        /// Tenant.
        tenant: u16,
    },
    /// Two keys for one tenant or one SPI.
    #[error("duplicate key for tenant {tenant} or SPI {spi}")]
    Duplicate {
        /// Tenant.
        tenant: u16,
        /// SPI.
        spi: u32,
    },
}

struct Key {
    spi: u32,
    tenant: TenantId,
    aead: LessSafeKey,
    seq: u64,
}

/// The AES-GCM NT.
pub struct Crypto {
    dir: Direction,
    sender: u32,
    by_tenant: FxHashMap<TenantId, usize>,
    by_spi: FxHashMap<u32, usize>,
    keys: Vec<Key>,
    windows: FxHashMap<(u32, u32), Window>,
    max_senders: usize,
}

impl core::fmt::Debug for Crypto {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Crypto").field("dir", &self.dir).field("sender", &self.sender).field("keys", &self.keys.len()).finish()
    }
}

fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

impl CryptoConfig {
    /// Checks the keys (hex, length, one per tenant and per SPI) without building them.
    pub fn check_keys(&self) -> Result<(), CryptoConfigError> {
        let mut seen = std::collections::HashSet::with_capacity(self.keys.len());
        let mut spis = std::collections::HashSet::with_capacity(self.keys.len());
        for k in &self.keys {
            if !matches!(k.key_hex.len(), 32 | 64) || parse_hex(&k.key_hex).is_none() {
                return Err(CryptoConfigError::BadKey { tenant: k.tenant });
            }
            if !seen.insert(k.tenant) || !spis.insert(k.spi) {
                return Err(CryptoConfigError::Duplicate { tenant: k.tenant, spi: k.spi });
            }
        }
        Ok(())
    }
}

impl Crypto {
    /// Builds the NT; draws the sender id from the OS RNG.
    pub fn new(cfg: &CryptoConfig) -> Result<Self, CryptoConfigError> {
        let mut id = [0u8; 4];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id).expect("the OS RNG is available");
        Self::with_sender(cfg, u32::from_be_bytes(id))
    }

    /// Builds the NT with a chosen sender id (tests; a deployment must keep ids unique per key).
    pub fn with_sender(cfg: &CryptoConfig, sender: u32) -> Result<Self, CryptoConfigError> {
        let mut c = Crypto {
            dir: cfg.direction,
            sender,
            by_tenant: FxHashMap::default(),
            by_spi: FxHashMap::default(),
            keys: Vec::new(),
            windows: FxHashMap::with_capacity_and_hasher(cfg.max_senders, Default::default()),
            max_senders: cfg.max_senders,
        };
        for k in &cfg.keys {
            let raw = parse_hex(&k.key_hex).ok_or(CryptoConfigError::BadKey { tenant: k.tenant })?;
            let alg = match raw.len() {
                16 => &AES_128_GCM,
                32 => &AES_256_GCM,
                _ => return Err(CryptoConfigError::BadKey { tenant: k.tenant }),
            };
            let unbound = UnboundKey::new(alg, &raw).map_err(|_| CryptoConfigError::BadKey { tenant: k.tenant })?;
            let t = TenantId(k.tenant);
            if c.by_tenant.contains_key(&t) || c.by_spi.contains_key(&k.spi) {
                return Err(CryptoConfigError::Duplicate { tenant: k.tenant, spi: k.spi });
            }
            c.by_tenant.insert(t, c.keys.len());
            c.by_spi.insert(k.spi, c.keys.len());
            c.keys.push(Key { spi: k.spi, tenant: t, aead: LessSafeKey::new(unbound), seq: 0 });
        }
        Ok(c)
    }

    fn encrypt(&mut self, pkt: &mut Pkt<'_>) -> Verdict {
        let Some(&ki) = self.by_tenant.get(&pkt.meta.tenant) else { return Verdict::Drop(DropReason::CryptoNoKey) };
        let off = pkt.meta.off as usize;
        let len = pkt.meta.len as usize;
        if off < HDR || off + len + TAG > pkt.buf.len() {
            return Verdict::Drop(DropReason::CryptoNoRoom);
        }
        let key = &mut self.keys[ki];
        key.seq += 1;
        let seq = key.seq;
        // Move the VXLAN header into the headroom; the crypto header takes its place.
        pkt.buf.copy_within(off..off + vxlan::HEADER_LEN, off - HDR);
        let h = off - HDR + vxlan::HEADER_LEN;
        let mut hdr = [0u8; HDR];
        hdr[0..4].copy_from_slice(&key.spi.to_be_bytes());
        hdr[4..8].copy_from_slice(&self.sender.to_be_bytes());
        hdr[8..16].copy_from_slice(&seq.to_be_bytes());
        pkt.buf[h..h + HDR].copy_from_slice(&hdr);
        let body = h + HDR..off + len;
        let nonce = Nonce::assume_unique_for_key(hdr[4..16].try_into().expect("12 bytes"));
        let tag = match key.aead.seal_in_place_separate_tag(nonce, Aad::from(&hdr), &mut pkt.buf[body.clone()]) {
            Ok(t) => t,
            Err(_) => return Verdict::Drop(DropReason::CryptoNoRoom),
        };
        pkt.buf[body.end..body.end + TAG].copy_from_slice(tag.as_ref());
        pkt.meta.off = (off - HDR) as u16;
        pkt.meta.len = (len + OVERHEAD) as u16;
        pkt.meta.inner = None;
        Verdict::Continue
    }

    fn decrypt(&mut self, pkt: &mut Pkt<'_>) -> Verdict {
        let off = pkt.meta.off as usize;
        let len = pkt.meta.len as usize;
        if len < vxlan::HEADER_LEN + OVERHEAD {
            return Verdict::Drop(DropReason::CryptoMalformed);
        }
        let h = off + vxlan::HEADER_LEN;
        let mut hdr = [0u8; HDR];
        hdr.copy_from_slice(&pkt.buf[h..h + HDR]);
        let spi = u32::from_be_bytes(hdr[0..4].try_into().expect("4 bytes"));
        let sender = u32::from_be_bytes(hdr[4..8].try_into().expect("4 bytes"));
        let seq = u64::from_be_bytes(hdr[8..16].try_into().expect("8 bytes"));
        let Some(&ki) = self.by_spi.get(&spi) else { return Verdict::Drop(DropReason::CryptoNoKey) };
        let key = &self.keys[ki];
        if key.tenant != pkt.meta.tenant {
            // A key is only usable by the tenant it belongs to.
            return Verdict::Drop(DropReason::CryptoNoKey);
        }
        let win = self.windows.get(&(spi, sender)).copied().unwrap_or_default();
        // (Senders number from 1.)
        if seq == 0 || !win.check(seq) {
            return Verdict::Drop(DropReason::CryptoReplay);
        }
        if !self.windows.contains_key(&(spi, sender)) && self.windows.len() >= self.max_senders {
            return Verdict::Drop(DropReason::CryptoReplayStateFull);
        }
        let nonce = Nonce::assume_unique_for_key(hdr[4..16].try_into().expect("12 bytes"));
        let body = h + HDR..off + len;
        if key.aead.open_in_place(nonce, Aad::from(&hdr), &mut pkt.buf[body.clone()]).is_err() {
            return Verdict::Drop(DropReason::CryptoAuthFailed);
        }
        let mut w = win;
        w.accept(seq);
        self.windows.insert((spi, sender), w);
        // Put the VXLAN header back in front of the plaintext.
        pkt.buf.copy_within(off..off + vxlan::HEADER_LEN, off + HDR);
        let off = off + HDR;
        let len = len - OVERHEAD;
        pkt.meta.off = off as u16;
        pkt.meta.len = len as u16;
        match layout::parse_inner(&pkt.buf[off + vxlan::HEADER_LEN..off + len]) {
            Ok(l) => {
                pkt.meta.inner = Some(l);
                Verdict::Continue
            }
            Err(_) => Verdict::Drop(DropReason::CryptoBadInner),
        }
    }
}

/// A decryptor's moved state: its replay windows, by (SPI, sender).
#[derive(Serialize, Deserialize)]
struct SavedWindows {
    windows: Vec<((u32, u32), Window)>,
}

impl Nt for Crypto {
    fn kind(&self) -> &'static str {
        "aes_gcm"
    }
    fn is_engine(&self) -> bool {
        true
    }
    fn process(&mut self, _cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        match self.dir {
            Direction::Encrypt => self.encrypt(pkt),
            Direction::Decrypt => self.decrypt(pkt),
        }
    }

    /// A decryptor's replay windows (see the module docs); an encryptor has nothing to move.
    fn save_state(&self, _now: Instant) -> Option<Vec<u8>> {
        if self.dir == Direction::Encrypt {
            return None;
        }
        postcard::to_allocvec(&SavedWindows { windows: self.windows.iter().map(|(k, w)| (*k, *w)).collect() }).ok()
    }

    /// Merges saved windows into this decryptor's (a sender both saw: what either opened is a
    /// replay). Windows past `max_senders` are left out.
    fn restore_state(&mut self, state: &[u8], _now: Instant) -> Result<usize, StateError> {
        if self.dir == Direction::Encrypt {
            return Err(StateError::Unsupported("aes_gcm (encrypt)"));
        }
        let saved: SavedWindows = postcard::from_bytes(state).map_err(|e| StateError::Malformed("aes_gcm", e.to_string()))?;
        let mut took = 0;
        for (k, w) in &saved.windows {
            if let Some(mine) = self.windows.get_mut(k) {
                mine.merge(w);
            } else if self.windows.len() < self.max_senders {
                self.windows.insert(*k, *w);
            } else {
                continue;
            }
            took += 1;
        }
        Ok(took)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use snic_core::time::Instant;

    fn cfg(dir: Direction) -> CryptoConfig {
        CryptoConfig {
            direction: dir,
            keys: vec![
                TenantKey { tenant: 1, spi: 0x100, key_hex: "000102030405060708090a0b0c0d0e0f".into() },
                TenantKey { tenant: 2, spi: 0x200, key_hex: "00".repeat(32) },
            ],
            max_senders: 4,
        }
    }

    fn cx() -> Ctx<'static> {
        Ctx::real(Instant::ZERO)
    }

    #[test]
    fn roundtrip_restores_the_exact_packet() {
        let mut enc = Crypto::with_sender(&cfg(Direction::Encrypt), 7).unwrap();
        let mut dec = Crypto::with_sender(&cfg(Direction::Decrypt), 9).unwrap();
        for n in [0usize, 1, 64, 1400] {
            let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), n);
            let before = p.clone_bytes();
            assert_eq!(enc.process(&cx(), &mut p.pkt()), Verdict::Continue);
            assert_eq!(p.meta.len as usize, before.len() + OVERHEAD);
            assert!(p.meta.inner.is_none());
            assert_ne!(p.clone_bytes()[8 + 16..8 + 16 + 14], before[8..8 + 14], "inner header is hidden");
            assert_eq!(dec.process(&cx(), &mut p.pkt()), Verdict::Continue);
            assert_eq!(p.clone_bytes(), before);
            assert_eq!(p.meta.inner.unwrap().key, p.reparse().key);
        }
    }

    #[test]
    fn replay_tamper_and_wrong_tenant_are_dropped() {
        let mut enc = Crypto::with_sender(&cfg(Direction::Encrypt), 7).unwrap();
        let mut dec = Crypto::with_sender(&cfg(Direction::Decrypt), 9).unwrap();
        let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 100);
        enc.process(&cx(), &mut p.pkt());
        let sealed = (p.buf.clone(), p.meta);
        assert_eq!(dec.process(&cx(), &mut p.pkt()), Verdict::Continue);
        // Replay of the same packet.
        p.buf = sealed.0.clone();
        p.meta = sealed.1;
        assert_eq!(dec.process(&cx(), &mut p.pkt()), Verdict::Drop(DropReason::CryptoReplay));
        // Tampered ciphertext.
        let mut q = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 100);
        enc.process(&cx(), &mut q.pkt());
        let genuine = (q.buf.clone(), q.meta);
        let mid = q.meta.off as usize + 40;
        q.buf[mid] ^= 1;
        assert_eq!(dec.process(&cx(), &mut q.pkt()), Verdict::Drop(DropReason::CryptoAuthFailed));
        // The failed packet did not advance the window: the genuine one still opens. (ring
        // leaves the buffer unspecified after a failed open, so restore the sealed copy.)
        (q.buf, q.meta) = genuine;
        assert_eq!(dec.process(&cx(), &mut q.pkt()), Verdict::Continue);
        // Tenant 2 presenting tenant 1's SPI.
        let mut r = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 10);
        enc.process(&cx(), &mut r.pkt());
        r.meta.tenant = TenantId(2);
        assert_eq!(dec.process(&cx(), &mut r.pkt()), Verdict::Drop(DropReason::CryptoNoKey));
        // No key for the tenant at the encryptor.
        let mut s = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 10);
        s.meta.tenant = TenantId(3);
        assert_eq!(enc.process(&cx(), &mut s.pkt()), Verdict::Drop(DropReason::CryptoNoKey));
    }

    #[test]
    fn a_moved_decryptor_refuses_what_it_opened_before_the_move_and_opens_what_follows() {
        let mut enc = Crypto::with_sender(&cfg(Direction::Encrypt), 7).unwrap();
        let (mut there, mut here) =
            (Crypto::with_sender(&cfg(Direction::Decrypt), 9).unwrap(), Crypto::with_sender(&cfg(Direction::Decrypt), 10).unwrap());
        let sealed: Vec<(Vec<u8>, _)> = (0..4)
            .map(|_| {
                let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 100);
                enc.process(&cx(), &mut p.pkt());
                (p.buf, p.meta)
            })
            .collect();
        let open = |d: &mut Crypto, i: usize| {
            let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 100);
            (p.buf, p.meta) = sealed[i].clone();
            d.process(&cx(), &mut p.pkt())
        };
        // The peer opened packets 0 and 2; home had opened 1 before it went.
        assert_eq!(
            (open(&mut there, 0), open(&mut there, 2), open(&mut here, 1)),
            (Verdict::Continue, Verdict::Continue, Verdict::Continue)
        );
        assert_eq!(enc.save_state(Instant::ZERO), None, "an encryptor moves nothing");
        let state = there.save_state(Instant::ZERO).expect("a decryptor saves its windows");
        assert_eq!(here.restore_state(&state, Instant::ZERO), Ok(1));
        for i in 0..3 {
            assert_eq!(open(&mut here, i), Verdict::Drop(DropReason::CryptoReplay), "packet {i}, opened on one side or the other");
        }
        assert_eq!(open(&mut here, 3), Verdict::Continue);
        assert!(matches!(here.restore_state(b"garbage", Instant::ZERO), Err(StateError::Malformed(..))));
        assert!(matches!(enc.restore_state(&state, Instant::ZERO), Err(StateError::Unsupported(_))));
    }

    #[test]
    fn bad_keys_rejected() {
        let mut c = cfg(Direction::Encrypt);
        c.keys[0].key_hex = "abc".into();
        assert_eq!(Crypto::new(&c).unwrap_err(), CryptoConfigError::BadKey { tenant: 1 });
        let mut c = cfg(Direction::Encrypt);
        c.keys[1].spi = 0x100;
        assert!(matches!(Crypto::new(&c).unwrap_err(), CryptoConfigError::Duplicate { .. }));
    }

    impl TestPkt {
        fn clone_bytes(&self) -> Vec<u8> {
            self.buf[self.meta.off as usize..self.meta.off as usize + self.meta.len as usize].to_vec()
        }
    }
}
