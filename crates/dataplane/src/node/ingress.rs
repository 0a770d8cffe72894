//! The node's receive half: a received datagram's outer and inner headers parsed, its MAT
//! action (through a memo of the last key), the tenant's checks — only its own VTEPs, its
//! ingress limit, its quota in the store — a partial checksum finished, the sender learned and
//! the descriptor written. Where the packet goes next is the node's: [`Ingress::admit`] says
//! which way ([`Arrival`]), and the node carries it out, as [`super::transmit::Transmit`] does
//! for the way out.
//!
//! [`Ingress`] holds the MAT memo; what it touches of the node comes in a [`Link`] for the call
//! and the core.

use super::transmit::Link;
use crate::backend::{Framing, RxMeta};
use crate::stats::Stats;
use crate::store::{Peer, Store, MAX_TENANTS};
use crate::Drop;
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::{Action, Mat, MatKey, SourceCheck};
use snic_core::node::NodeCore;
use snic_core::time::Instant;
use snic_core::walk::Walk;
use snic_nt::HEADROOM;
use snic_wire::layout::{self, InnerL3};
use snic_wire::{vxlan, ParseError};
use std::net::SocketAddr;
use std::sync::Arc;

/// Where a received datagram comes from, as [`Ingress::admit`] treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// A tenant's endpoint (or a peer that redirected one of a chain's packets here).
    Endpoint,
    /// A peer in a pool behind a switch, to this node as the packet's state's owner: it goes no
    /// further in the pool.
    Owner,
}

/// What ingress made of a datagram: the way the node sends it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arrival {
    /// Dropped, counted, its buffer back in the store.
    Dropped,
    /// Its tenant's rule passes it through (no DAG): to egress. Counted received.
    Out,
    /// Not VXLAN (`.0`): a peer's redirected packet, or a drop for it. Nothing is charged.
    Other(ParseError),
    /// In a pool behind a switch, from an endpoint: its NT state may be another node's.
    /// Counted received.
    Pooled(DagUid),
    /// Its DAG is switching between chain candidates, or unknown: held. Counted received.
    Held(DagUid),
    /// It takes `route` (its walk starts there), `len` bytes received: not yet counted, so
    /// that a run of them is counted at once.
    Route { tenant: TenantId, route: u32, len: u32 },
}

/// The receive half. See the module docs.
pub(super) struct Ingress {
    framing: Framing,
    /// The UDP port learned peers listen on (`None`: the datagram's source port).
    vtep_port: Option<u16>,
    /// The last MAT lookup (key and result): consecutive packets of a flow share it. It belongs
    /// to `table`, held here so that its address cannot be reused; a newly published table
    /// clears it ([`Ingress::begin`], once per batch).
    memo: Option<(MatKey, Option<Action>)>,
    /// The same for keys that pack into one word ([`memo_key`]: IPv4 and non-IP), checked
    /// first: comparing a packed key cost ~12 instructions a packet less than building and
    /// comparing a [`MatKey`]. [`NO_MEMO`]: none.
    fast: (u128, Option<Action>),
    table: Arc<Mat>,
}

impl Ingress {
    pub(super) fn new(framing: Framing, vtep_port: Option<u16>) -> Self {
        Ingress { framing, vtep_port, memo: None, fast: (NO_MEMO, None), table: Arc::new(Mat::new()) }
    }

    /// A batch begins with `mat` as the MAT: the memo is forgotten if it is a new one.
    #[inline]
    pub(super) fn begin(&mut self, mat: &Arc<Mat>) {
        if !Arc::ptr_eq(mat, &self.table) {
            self.table = mat.clone();
            self.memo = None;
            self.fast = (NO_MEMO, None);
        }
    }

    /// Takes received datagram `idx` (`m`), from `source`, as far as its tenant's checks and
    /// charge: see the module docs. Inlined at both of the node's calls: left to itself, the
    /// compiler kept the path out of line once it had two, at ~20% more instructions a packet
    /// (callgrind, dummy 64 B).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn admit<B>(
        &mut self,
        l: &mut Link<'_, B>,
        core: &mut NodeCore,
        idx: u32,
        m: RxMeta,
        now: Instant,
        mat: &Mat,
        source: Source,
    ) -> Arrival {
        // SAFETY: the dispatcher owns `idx` (just received, not yet handed to a worker).
        let (buf, d) = unsafe { l.slots.get(idx) };
        if m.truncated {
            l.drop_unattributed(idx, Drop::Oversize);
            return Arrival::Dropped;
        }
        let data = &buf[HEADROOM..HEADROOM + m.len as usize];
        // The source VTEP, at the node's VTEP port if it has one (replies go there).
        let (off, len, vni, src) = match self.framing {
            Framing::Ethernet => match layout::parse_outer(data) {
                Ok(o) => (
                    HEADROOM + o.vxlan_off as usize,
                    o.vxlan_len as usize,
                    o.vni,
                    Peer { addr: SocketAddr::new(o.src_ip, self.vtep_port.unwrap_or(o.src_port)), mac: o.src_mac },
                ),
                Err(e) => {
                    l.drop_unattributed(idx, Drop::Parse(e));
                    return Arrival::Dropped;
                }
            },
            Framing::Datagram => match layout::parse_vxlan(data) {
                Ok(v) => {
                    let mut addr = m.src;
                    if let Some(p) = self.vtep_port {
                        addr.set_port(p);
                    }
                    (HEADROOM, m.len as usize, v, Peer { addr, mac: Default::default() })
                }
                Err(e) => return Arrival::Other(e),
            },
        };
        // Parsed straight into the descriptor (a layout built on the stack and copied in cost
        // ~30 instructions a packet, and a store-forwarding stall).
        let parse_err = layout::parse_inner_into(&buf[off + vxlan::HEADER_LEN..off + len], &mut d.meta.inner).err();
        let packed = memo_key(vni, &d.meta.inner);
        let action = match self.fast {
            (k, a) if k == packed => a,
            _ => classify(&mut self.memo, &mut self.fast, mat, vni, &d.meta.inner, packed),
        };
        let (tenant, dag) = match action {
            Some(Action::Dag { tenant, dag }) => (tenant, Some(dag)),
            Some(Action::PassThrough { tenant }) => (tenant, None),
            Some(Action::Drop) => {
                l.drop_unattributed(idx, Drop::MatDrop);
                return Arrival::Dropped;
            }
            None => {
                l.drop_unattributed(idx, parse_err.map_or(Drop::NoRule, Drop::Parse));
                return Arrival::Dropped;
            }
        };
        if tenant.index() >= MAX_TENANTS {
            l.drop_unattributed(idx, Drop::TenantQuota);
            return Arrival::Dropped;
        }
        // Only the tenant's own VTEPs may send on its VNIs (docs/endpoints.md, "Trust"): a frame
        // from elsewhere is counted and dropped before it is charged, admitted or learned from.
        if mat.restricts_sources() {
            let why = match mat.source_check(vni, &src.addr.ip(), m.ifindex) {
                SourceCheck::Allowed => None,
                SourceCheck::Foreign => Some(Drop::ForeignVtep),
                SourceCheck::WrongInterface => Some(Drop::SpoofedVtep),
            };
            if let Some(why) = why {
                l.drop_uncharged(idx, tenant, why);
                return Arrival::Dropped;
            }
        }
        // (The same steps as [`charge_rx`], written out: calling it here cost dummy 64 B 6–8%
        // in wall time, alternating runs, for 4 more instructions a packet.)
        if !core.admit(tenant, now) {
            l.drop_uncharged(idx, tenant, Drop::RateLimit);
            return Arrival::Dropped;
        }
        if let Err(e) = l.store.charge(idx, tenant, HEADROOM..HEADROOM + m.len as usize) {
            l.drop_uncharged(idx, tenant, e);
            return Arrival::Dropped;
        }
        // An endpoint that keeps its transmit offloads leaves inner TCP and UDP checksums
        // partial for a NIC to finish (docs/endpoints.md), and so does the node's own cutting
        // of its TCP bursts: the parse says so (`l4_partial`, the field against the
        // pseudo-header). They stay partial through NTs that take them so, and are finished
        // before one that does not (`Region`) and before the datagram leaves whole
        // (`Transmit`); one joined back into a burst never is.
        let inner = &d.meta.inner;
        // Learning gives the sender's id: the descriptor keeps 4 bytes, not its 40-byte address
        // (written per packet, that cost ~20 instructions a packet).
        let src = match inner {
            Some(il) => l.fdb.learn(vni, il.src_mac, src),
            None => l.fdb.sender(src),
        };
        let flow_hash = flow_hash(buf, inner, off, len);
        // Field by field, in place: building a whole `Desc` and copying it cost more.
        d.meta.off = off as u16;
        d.meta.len = len as u16;
        d.meta.vni = vni;
        d.meta.tenant = tenant;
        d.src = src;
        d.flow_hash = flow_hash;
        d.rx_ns = m.arrival(now);
        d.verdict = None;
        d.charged = true;
        let Some(uid) = dag else {
            d.walk = Walk::start(DagUid::default());
            l.stats.count_rx(tenant, 1, len as u64);
            return Arrival::Out;
        };
        if core.owners().on() && source == Source::Endpoint {
            l.stats.count_rx(tenant, 1, len as u64);
            return Arrival::Pooled(uid);
        }
        // The route its arrivals take now (node-internal UID), unless the DAG is switching
        // between chain candidates or unknown.
        let Some(route) = core.dags().arriving(uid) else {
            l.stats.count_rx(tenant, 1, len as u64);
            return Arrival::Held(uid);
        };
        d.walk = Walk::start(DagUid(route));
        Arrival::Route { tenant, route, len: len as u32 }
    }
}

/// Admits a received packet of `tenant` (`stored` bytes from `HEADROOM`, `len` of them its
/// VXLAN datagram): its ingress limit, a charge in the store, its receive counters. False:
/// dropped, counted. (On the fields it needs, so that the caller keeps its descriptor; the
/// usual path, [`Ingress::admit`], writes the same steps out.)
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn charge_rx(
    core: &mut NodeCore,
    store: &mut Store,
    stats: &mut Stats,
    idx: u32,
    tenant: TenantId,
    stored: usize,
    len: usize,
    now: Instant,
) -> bool {
    let why = if !core.admit(tenant, now) {
        Drop::RateLimit
    } else {
        match store.charge(idx, tenant, HEADROOM..HEADROOM + stored) {
            Ok(()) => {
                stats.count_rx(tenant, 1, len as u64);
                return true;
            }
            Err(e) => e,
        }
    };
    stats.tenant_mut(tenant).drops[why.index()] += 1;
    store.release(idx);
    false
}

/// The MAT's action for a packet on `vni` whose inner frame is `inner`, through the memo of
/// the last key (and into the packed one's when `packed` is not 0).
#[inline(never)]
fn classify(
    memo: &mut Option<(MatKey, Option<Action>)>,
    fast: &mut (u128, Option<Action>),
    mat: &Mat,
    vni: u32,
    inner: &Option<layout::InnerLayout>,
    packed: u128,
) -> Option<Action> {
    let key = match inner {
        Some(l) if l.l3 != InnerL3::Arp => MatKey { vni, proto: l.key.proto, dst: Some(rebuild(&l.key.dst)), dst_port: l.key.dst_port },
        _ => MatKey { vni, proto: 0, dst: None, dst_port: 0 },
    };
    let action = match memo {
        Some((k, a)) if *k == key => *a,
        _ => {
            let a = mat.lookup(&key);
            *memo = Some((key, a));
            a
        }
    };
    if packed != 0 {
        *fast = (packed, action);
    }
    action
}

/// Copies an address by variant. The parser has just written it as a one-byte tag and a
/// four-byte address; a plain copy reloads it with one 16-byte load spanning both stores, which
/// defeats store-to-load forwarding (it showed as 12% of the dispatcher's samples).
#[inline(always)]
fn rebuild(a: &std::net::IpAddr) -> std::net::IpAddr {
    match *a {
        std::net::IpAddr::V4(v) => std::net::IpAddr::V4(std::net::Ipv4Addr::from(u32::from(v))),
        std::net::IpAddr::V6(v) => std::net::IpAddr::V6(v),
    }
}

/// The fields of a packet's [`MatKey`] in one word, one to one with the key where it is not 0:
/// a tag (bits 120..), the VNI (64..96), and for IPv4 the protocol (48..56), destination port
/// (32..48) and address (0..32). Non-IP and ARP frames key on the VNI alone, as their
/// [`MatKey`] does; IPv6 does not fit (0).
#[inline(always)]
fn memo_key(vni: u32, inner: &Option<layout::InnerLayout>) -> u128 {
    const V4: u128 = 1 << 120;
    const NO_DST: u128 = 2 << 120;
    match inner {
        Some(l) if l.l3 == InnerL3::Ipv4 => match l.key.dst {
            std::net::IpAddr::V4(a) => {
                V4 | (vni as u128) << 64 | (l.key.proto as u128) << 48 | (l.key.dst_port as u128) << 32 | u32::from(a) as u128
            }
            std::net::IpAddr::V6(_) => 0,
        },
        Some(l) if l.l3 == InnerL3::Ipv6 => 0,
        _ => NO_DST | (vni as u128) << 64,
    }
}

/// The packed memo's key when it holds none: [`memo_key`] never gives it (its tags are 1 and
/// 2), nor 0, which the memo is never set to; so a hit needs one comparison.
const NO_MEMO: u128 = u128::MAX;

/// A packet's flow hash: its inner 5-tuple's, or for opaque (encrypted) traffic the first 8
/// bytes after the VXLAN header (the sender's SPI and id), which keeps each sender's packets in
/// order. `off`, `len`: the VXLAN datagram in `buf`.
#[inline(always)]
pub(super) fn flow_hash(buf: &[u8], inner: &Option<layout::InnerLayout>, off: usize, len: usize) -> u64 {
    match inner {
        Some(l) => l.key.hash64(),
        None => {
            let s = off + vxlan::HEADER_LEN;
            let b = &buf[s..(s + 8).min(off + len)];
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use snic_wire::layout::{FlowKey, InnerLayout};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// An inner frame of kind `l3` toward `dst`, with the protocol and port given.
    fn inner(l3: InnerL3, dst: IpAddr, proto: u8, dst_port: u16) -> Option<InnerLayout> {
        let key = FlowKey { src: IpAddr::V4(Ipv4Addr::UNSPECIFIED), dst, proto, src_port: 1, dst_port };
        Some(InnerLayout {
            dst_mac: Default::default(),
            src_mac: Default::default(),
            l3,
            l3_off: 14,
            l4_off: 34,
            l3_end: 60,
            key,
            l4_flags: 0,
            l4_partial: false,
        })
    }

    fn mat_key(vni: u32, l: &Option<InnerLayout>) -> MatKey {
        match l {
            Some(l) if l.l3 != InnerL3::Arp => MatKey { vni, proto: l.key.proto, dst: Some(l.key.dst), dst_port: l.key.dst_port },
            _ => MatKey { vni, proto: 0, dst: None, dst_port: 0 },
        }
    }

    proptest! {
        /// Two packets share a packed memo key exactly when they share a MAT key (small
        /// ranges, so that equal fields come up often).
        #[test]
        fn the_packed_memo_key_is_one_to_one_with_the_mat_key(
            a in (0u32..3, 0usize..4, 0u8..3, 0u16..3, 0u32..3),
            b in (0u32..3, 0usize..4, 0u8..3, 0u16..3, 0u32..3),
        ) {
            let frame = |(vni, kind, proto, port, ip): (u32, usize, u8, u16, u32)| {
                let v4 = IpAddr::V4(Ipv4Addr::from(ip));
                let l = match kind {
                    0 => inner(InnerL3::Ipv4, v4, proto, port),
                    1 => inner(InnerL3::Arp, v4, 0, 0),
                    2 => inner(InnerL3::Ipv6, IpAddr::V6(Ipv6Addr::from(ip as u128)), proto, port),
                    _ => None,
                };
                (vni << 22, l)
            };
            let ((va, la), (vb, lb)) = (frame(a), frame(b));
            let (ka, kb) = (memo_key(va, &la), memo_key(vb, &lb));
            let v6 = |l: &Option<InnerLayout>| l.is_some_and(|l| l.l3 == InnerL3::Ipv6);
            prop_assert_eq!(ka == 0, v6(&la), "IPv6 alone is not packed");
            if ka != 0 && kb != 0 {
                prop_assert_eq!(ka == kb, mat_key(va, &la) == mat_key(vb, &lb));
            }
        }

        #[test]
        fn no_frame_packs_to_the_empty_memo(vni in any::<u32>(), proto in any::<u8>(), port in any::<u16>(), ip in any::<u32>(), kind in 0usize..3) {
            let l = match kind {
                0 => inner(InnerL3::Ipv4, IpAddr::V4(Ipv4Addr::from(ip)), proto, port),
                1 => inner(InnerL3::Arp, IpAddr::V4(Ipv4Addr::from(ip)), 0, 0),
                _ => None,
            };
            // The ingress memo's hit test is one comparison, against a key no frame packs to.
            prop_assert_ne!(memo_key(vni, &l), NO_MEMO);
        }
    }
}
