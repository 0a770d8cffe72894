//! The AF_XDP backend: whole Ethernet frames from one receive queue of one interface, received
//! into and sent from the packet store itself.
//!
//! The store's memory is the socket's UMEM ([`crate::store::Slots::region`], registered with
//! unaligned chunks of [`BUF_STRIDE`] bytes): the kernel writes a frame straight into a
//! store buffer at its [`HEADROOM`], the node processes it where it lies, and the kernel sends
//! it from there. No copy in the backend. Buffers move between the node and the kernel by the
//! store's ownership rule:
//!
//! - the node lends the backend [`FILL`] buffers at [`Backend::attach`], all given to the fill
//!   ring; each `recv` hands the node the buffers the kernel filled and gives the fill ring the
//!   free buffers the node offered instead, so the kernel always has `FILL` to write into;
//! - a transmitted buffer stays the backend's until the completion ring returns it
//!   ([`Backend::keeps_sent`], [`Backend::reclaim`]); at most [`IN_FLIGHT`] are out.
//!
//! The XDP program ([`prog`]) takes only IPv4 UDP to the node's port and address; all else goes
//! to the kernel (ARP, ping, the API). Outer IP fragments go to the kernel too, which reassembles
//! them for a UDP socket bound beside the AF_XDP socket; the backend frames what that socket
//! receives as the XDP path would (outer headers written in front) and hands it to the node.
//!
//! Outer headers need the next hop's MAC. The node learns each sender's from its frames; for a
//! peer it was only told of (a configured VTEP) the frame leaves with a zero MAC and the backend
//! looks the address up in the kernel's neighbour table ([`neigh::Neighbours`]). When the
//! kernel has not resolved it either, that packet goes out through the UDP socket, so the
//! kernel's stack routes it and its ARP resolves the neighbour for the packets after it.
//!
//! Native mode (XDP in the driver; on veth it needs GRO-capable NAPI, which attaching turns on)
//! or generic mode (after the kernel's receive path allocated an skb; works on any interface).
//! Copy mode: zero-copy needs a NIC driver that supports it, and cannot be tested on veth.
//! IPv4 underlay only; one interface and one queue per backend.

pub mod neigh;
pub mod prog;
pub mod soft;

use super::{Backend, Framing, RxMeta, TxReq, TxResult, Waker};
use crate::store::{Slots, BUF_SIZE, BUF_STRIDE};
use libxdp_sys as sys;
use neigh::{Iface, Neighbours};
use snic_nt::HEADROOM;
use snic_wire::ethernet::MacAddr;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

/// Buffers the fill ring holds (and its size; the receive ring's too).
pub const FILL: usize = 2048;
/// Most transmitted buffers not yet completed (the transmit and completion rings' size).
pub const IN_FLIGHT: usize = 2048;
/// Outer Ethernet + IPv4 + UDP header bytes of a frame the backend builds.
const OUTER: usize = 14 + 20 + 8;
/// The kernel puts a received frame this far into its chunk (`XDP_PACKET_HEADROOM`).
const XDP_PACKET_HEADROOM: usize = 256;
/// In unaligned mode a descriptor's address carries an offset in its top 16 bits.
const ADDR_MASK: u64 = (1 << 48) - 1;
const SOL_XDP: i32 = 283;
/// Slots of the program's socket map: queue ids it can hold (a queue the interface lacks is
/// refused when the socket binds to it).
const MAX_QUEUES: u32 = 256;
const XDP_FLAGS_UPDATE_IF_NOEXIST: u32 = 1;
const XDP_FLAGS_SKB_MODE: u32 = 2;
const XDP_FLAGS_DRV_MODE: u32 = 4;

/// Where the XDP program runs: node.yaml's `io.af_xdp.mode`.
pub use snic_core::config::XdpMode;

/// What an AF_XDP backend binds to.
#[derive(Debug, Clone)]
pub struct XdpConfig {
    /// The interface.
    pub interface: String,
    /// Its receive queue.
    pub queue: u32,
    /// Where the program runs.
    pub mode: XdpMode,
    /// The node's VXLAN address: its IP is matched by the program (0.0.0.0: the interface's
    /// first IPv4 address), its port by the program and bound by the UDP socket beside.
    pub addr: SocketAddrV4,
}

/// Counters of the paths beside the fast one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct XdpCounters {
    /// Frames received, both paths.
    pub rx_frames: u64,
    /// Datagrams received through the UDP socket beside (outer fragments the kernel reassembled).
    pub rx_reassembled: u64,
    /// Frames sent through the UDP socket because the next hop's MAC was unknown.
    pub tx_unresolved: u64,
    /// Transmit-ring kicks (`sendto`) that the kernel answered with an error other than "busy".
    pub tx_kick_errors: u64,
}

/// Rings as libxdp lays them out; boxed because libxdp keeps pointers to them.
struct Rings {
    fill: sys::xsk_ring_prod,
    comp: sys::xsk_ring_cons,
    rx: sys::xsk_ring_cons,
    tx: sys::xsk_ring_prod,
}

/// An AF_XDP socket on one interface queue, over the node's packet store.
pub struct XdpBackend {
    cfg: XdpConfig,
    iface: Iface,
    local: SocketAddrV4,
    prog: prog::Loaded,
    attached_flags: u32,
    rings: Box<Rings>,
    umem: *mut sys::xsk_umem,
    xsk: *mut sys::xsk_socket,
    slots: Option<Arc<Slots>>,
    udp: UdpSocket,
    neigh: Neighbours,
    waker: Waker,
    /// Transmitted, not yet given back.
    in_flight: usize,
    /// Sent through the UDP socket (copied by the kernel): given back at the next reclaim.
    done: Vec<u32>,
    counters: XdpCounters,
    /// Per-tenant receive queues, once steered ([`soft`]).
    soft: soft::SoftQueues,
}

// SAFETY: the raw pointers are libxdp's objects for this socket, used only by the thread that
// owns the backend (it moves with it, as a whole).
unsafe impl Send for XdpBackend {}

impl std::fmt::Debug for XdpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpBackend")
            .field("interface", &self.cfg.interface)
            .field("queue", &self.cfg.queue)
            .field("local", &self.local)
            .finish()
    }
}

fn err(what: &str, r: i32) -> io::Error {
    let e = io::Error::from_raw_os_error(if r < 0 { -r } else { r });
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl XdpBackend {
    /// Loads the program on `cfg.interface` and binds the UDP socket beside; the AF_XDP socket
    /// itself is made at [`Backend::attach`], when the node has its store. Needs `CAP_NET_ADMIN`,
    /// `CAP_BPF` and `CAP_IPC_LOCK` (root), and fails, saying why, when another XDP program is
    /// already attached to the interface.
    pub fn new(cfg: XdpConfig) -> io::Result<XdpBackend> {
        let iface = Iface::get(&cfg.interface)?;
        if cfg.queue >= MAX_QUEUES {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("queue {}: at most {MAX_QUEUES} receive queues", cfg.queue)));
        }
        let ip = match *cfg.addr.ip() {
            Ipv4Addr::UNSPECIFIED => iface.ipv4.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} has no IPv4 address: give the node's address explicitly", iface.name),
                )
            })?,
            ip => ip,
        };
        let local = SocketAddrV4::new(ip, cfg.addr.port());
        let udp = UdpSocket::bind(SocketAddrV4::new(ip, cfg.addr.port()))
            .map_err(|e| io::Error::new(e.kind(), format!("binding the UDP socket beside AF_XDP on {local}: {e}")))?;
        udp.set_nonblocking(true)?;
        let filter = prog::Filter { port: cfg.addr.port(), addr: Some(ip), no_socket: prog::XDP_PASS };
        let prog = prog::Loaded::load(&filter, MAX_QUEUES)?;
        let flags = XDP_FLAGS_UPDATE_IF_NOEXIST | if cfg.mode == XdpMode::Native { XDP_FLAGS_DRV_MODE } else { XDP_FLAGS_SKB_MODE };
        // SAFETY: a valid interface index and program descriptor.
        let attach = |flags: u32| unsafe { sys::bpf_xdp_attach(iface.index as i32, prog.prog.as_raw_fd(), flags, std::ptr::null()) };
        let mut r = attach(flags);
        if (-r == libc::EBUSY || -r == libc::EEXIST) && prog::attached_is_ours(iface.index, flags & !XDP_FLAGS_UPDATE_IF_NOEXIST) {
            // A node that could not detach (killed, or crashed) left its program: a restarted
            // node takes the interface back. Anyone else's program is left alone.
            tracing::warn!(interface = %iface.name, "replacing the XDP program a previous snic node left attached");
            r = attach(flags & !XDP_FLAGS_UPDATE_IF_NOEXIST);
        }
        if r < 0 {
            let hint = if -r == libc::EBUSY || -r == libc::EEXIST {
                " (another program is attached: `ip link set dev IF xdp off` removes it)"
            } else {
                ""
            };
            return Err(err(&format!("attaching the XDP program to {} in {:?} mode{hint}", iface.name, cfg.mode), r));
        }
        // SAFETY: all-zero rings are what libxdp expects to fill in.
        let rings = Box::new(unsafe { std::mem::zeroed::<Rings>() });
        Ok(XdpBackend {
            neigh: Neighbours::new(&iface.name),
            cfg,
            iface,
            local,
            prog,
            attached_flags: flags,
            rings,
            umem: std::ptr::null_mut(),
            xsk: std::ptr::null_mut(),
            slots: None,
            udp,
            waker: Waker::new()?,
            in_flight: 0,
            done: Vec::new(),
            counters: XdpCounters::default(),
            soft: soft::SoftQueues::default(),
        })
    }

    /// The interface's MAC (the source of the node's frames).
    pub fn mac(&self) -> MacAddr {
        self.iface.mac
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.iface.index
    }

    /// Counters of the paths beside the fast one.
    pub fn counters(&self) -> XdpCounters {
        self.counters
    }

    fn fd(&self) -> i32 {
        // SAFETY: a socket made in `attach` (callers check it is).
        unsafe { sys::xsk_socket__fd(self.xsk) }
    }

    /// The socket's kernel statistics.
    fn statistics(&self) -> Option<sys::xdp_statistics> {
        if self.xsk.is_null() {
            return None;
        }
        // SAFETY: zeroed plain struct, filled by getsockopt up to `len`.
        let mut s: sys::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<sys::xdp_statistics>() as libc::socklen_t;
        // SAFETY: valid socket, buffer and length.
        let r = unsafe { libc::getsockopt(self.fd(), SOL_XDP, sys::XDP_STATISTICS as i32, &mut s as *mut _ as *mut _, &mut len) };
        (r == 0).then_some(s)
    }

    /// The kernel processes the transmit ring on a kick (copy mode always needs one).
    fn kick_tx(&mut self) {
        // SAFETY: the ring was set up by xsk_socket__create.
        if unsafe { sys::xsk_ring_prod__needs_wakeup(&self.rings.tx) } == 0 {
            return;
        }
        // SAFETY: a valid socket; no buffer.
        let r = unsafe { libc::sendto(self.fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
        if r < 0 {
            let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // Busy or full: the ring is taken at the next kick.
            if ![libc::EAGAIN, libc::EBUSY, libc::ENOBUFS, libc::ENETDOWN].contains(&e) {
                self.counters.tx_kick_errors += 1;
            }
        }
    }

    /// True if frame `q` has its next hop's MAC, written in now if the node sent it with none
    /// and the kernel's neighbour table has it.
    fn resolve(&mut self, slots: &Slots, q: &TxReq) -> bool {
        // SAFETY: the node owns queued transmit buffers.
        let (buf, _) = unsafe { slots.get(q.idx) };
        let f = &mut buf[q.start as usize..q.start as usize + q.len as usize];
        if f.len() < OUTER || f[..6] != [0; 6] {
            return true;
        }
        match self.neigh.get(Ipv4Addr::new(f[30], f[31], f[32], f[33])) {
            Some(m) => {
                f[..6].copy_from_slice(&m.0);
                true
            }
            None => false,
        }
    }

    /// Puts `reqs` on the transmit ring, as many as it has room for; how many.
    fn put_on_ring(&mut self, reqs: &[TxReq]) -> usize {
        let r = &mut *self.rings;
        let mut at = 0;
        // SAFETY: this thread's ring; each descriptor names the frame inside a buffer the node
        // hands over (it does not free it: `keeps_sent`).
        let got = unsafe {
            let got = sys::xsk_ring_prod__reserve(&mut r.tx, reqs.len() as u32, &mut at) as usize;
            for (i, q) in reqs[..got].iter().enumerate() {
                let d = &mut *sys::xsk_ring_prod__tx_desc(&mut r.tx, at + i as u32);
                d.addr = (crate::store::BUF_BASE + q.idx as usize * BUF_STRIDE + q.start as usize) as u64;
                d.len = q.len as u32;
                d.options = 0;
            }
            sys::xsk_ring_prod__submit(&mut r.tx, got as u32);
            got
        };
        self.in_flight += got;
        got
    }

    /// A datagram from the UDP socket beside, framed into buffer `idx` as the XDP path would
    /// have delivered it; its length, or `None` when nothing waits.
    fn recv_beside(&mut self, slots: &Slots, idx: u32) -> Option<(u16, bool)> {
        // SAFETY: the node owns `idx` while it lends it to `recv`.
        let (buf, _) = unsafe { slots.get(idx) };
        let room = &mut buf[HEADROOM + OUTER..];
        let cap = room.len();
        let (n, from) = match self.udp.recv_from(room) {
            Ok(x) => x,
            Err(_) => return None,
        };
        let SocketAddr::V4(from) = from else { return None };
        self.counters.rx_reassembled += 1;
        self.counters.rx_frames += 1;
        let src_mac = self.neigh.get(*from.ip()).unwrap_or(MacAddr([0; 6]));
        let n = n.min(cap);
        write_outer(&mut buf[HEADROOM..HEADROOM + OUTER], self.iface.mac, src_mac, from, self.local, n);
        Some(((OUTER + n) as u16, false))
    }
}

/// Writes Ethernet, IPv4 and UDP headers for a datagram of `payload` bytes from `src` to `dst`
/// into `h` (UDP checksum 0: IPv4 allows it).
fn write_outer(h: &mut [u8], dst_mac: MacAddr, src_mac: MacAddr, src: SocketAddrV4, dst: SocketAddrV4, payload: usize) {
    h[0..6].copy_from_slice(&dst_mac.0);
    h[6..12].copy_from_slice(&src_mac.0);
    h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut h[14..34];
    ip.fill(0);
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + 8 + payload) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.ip().octets());
    ip[16..20].copy_from_slice(&dst.ip().octets());
    let c = snic_wire::checksum::checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp = &mut h[34..42];
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    udp[6..8].fill(0);
}

/// The chunk address the fill ring gets for buffer `idx`: `XDP_PACKET_HEADROOM` before its
/// frame's place, so the kernel writes the frame at the buffer's `HEADROOM`.
#[inline]
fn chunk_of(idx: u32) -> u64 {
    (crate::store::BUF_BASE + idx as usize * BUF_STRIDE + HEADROOM - XDP_PACKET_HEADROOM) as u64
}

impl XdpBackend {
    /// Deletes the socket and the UMEM (the socket leaves the map with it), then lets go of
    /// the store's memory: buffers the kernel held are the old store's.
    fn close_socket(&mut self) {
        // SAFETY: objects made by `attach`, each deleted once, the UMEM after its socket.
        unsafe {
            if !self.xsk.is_null() {
                sys::xsk_socket__delete(self.xsk);
            }
            if !self.umem.is_null() {
                sys::xsk_umem__delete(self.umem);
            }
        }
        self.xsk = std::ptr::null_mut();
        self.umem = std::ptr::null_mut();
        // SAFETY: all-zero rings are what libxdp expects to fill in (it holds none any more).
        *self.rings = unsafe { std::mem::zeroed::<Rings>() };
        self.in_flight = 0;
        self.done.clear();
        self.soft.reset();
        self.slots = None;
    }

    /// Where the kernel put a received frame: its buffer, and its metadata (a frame not where
    /// the layout puts it, after a program that moved the head, is brought to `HEADROOM`).
    fn frame_at(&self, slots: &Slots, d: &sys::xdp_desc) -> (u32, RxMeta) {
        let data = ((d.addr & ADDR_MASK) + (d.addr >> 48)) as usize;
        let b = slots.index_at(data).expect("the kernel returns chunks it was given");
        let at_off = data - crate::store::BUF_BASE - b as usize * BUF_STRIDE;
        let len = (d.len as usize).min(BUF_SIZE - HEADROOM);
        if at_off != HEADROOM {
            // SAFETY: the kernel gave the buffer back; the backend owns it until delivered.
            let (buf, _) = unsafe { slots.get(b) };
            let len = len.min(BUF_SIZE - at_off.max(HEADROOM));
            buf.copy_within(at_off..at_off + len, HEADROOM);
        }
        (b, RxMeta { len: len as u16, truncated: len < d.len as usize, ifindex: self.iface.index, ..RxMeta::default() })
    }

    /// Steered: everything the receive ring holds, into the tenants' queues ([`soft`]); the
    /// fill ring gets a buffer back for each frame.
    fn drain(&mut self, slots: &Slots) {
        if self.xsk.is_null() {
            return;
        }
        let fd = self.fd();
        loop {
            let (mut at, mut fat) = (0, 0);
            // SAFETY: this thread's rings; each descriptor names a chunk the kernel filled and
            // gave back. For each, the fill ring gets the buffer the queues hand back (a spare
            // for a queued frame, the frame's own for a dropped one).
            let n = unsafe {
                let r = &mut *self.rings;
                let mut n = sys::xsk_ring_cons__peek(&mut r.rx, 256, &mut at);
                if n == 0 {
                    if sys::xsk_ring_prod__needs_wakeup(&r.fill) != 0 {
                        libc::recvfrom(fd, std::ptr::null_mut(), 0, libc::MSG_DONTWAIT, std::ptr::null_mut(), std::ptr::null_mut());
                    }
                    return;
                }
                let got = sys::xsk_ring_prod__reserve(&mut r.fill, n, &mut fat);
                if got < n {
                    sys::xsk_ring_cons__cancel(&mut r.rx, n - got);
                    n = got;
                }
                for i in 0..n {
                    let d = *sys::xsk_ring_cons__rx_desc(&self.rings.rx, at + i);
                    let (b, meta) = self.frame_at(slots, &d);
                    let (buf, _) = slots.get(b);
                    let vni = soft::vni_of(&buf[HEADROOM..HEADROOM + meta.len as usize]);
                    let back = self.soft.arrive(b, meta, vni);
                    *sys::xsk_ring_prod__fill_addr(&mut self.rings.fill, fat + i) = chunk_of(back);
                }
                let r = &mut *self.rings;
                sys::xsk_ring_prod__submit(&mut r.fill, n);
                sys::xsk_ring_cons__release(&mut r.rx, n);
                n
            };
            self.counters.rx_frames += u64::from(n);
            if n == 0 {
                return;
            }
        }
    }
}

impl Drop for XdpBackend {
    fn drop(&mut self) {
        // SAFETY: the program attached by `new`, detached once, before its socket goes.
        unsafe { sys::bpf_xdp_detach(self.iface.index as i32, self.attached_flags & !XDP_FLAGS_UPDATE_IF_NOEXIST, std::ptr::null()) };
        // `slots` (the UMEM's memory) is released only after the kernel let go of it.
        self.close_socket();
    }
}

impl Backend for XdpBackend {
    fn framing(&self) -> Framing {
        Framing::Ethernet
    }

    /// The fill ring's, and the spares of the tenants' queues ([`soft::SPARE`]).
    fn held_buffers(&self) -> (usize, usize) {
        (FILL + soft::SPARE, IN_FLIGHT)
    }

    fn attach(&mut self, slots: &Arc<Slots>, lent: Vec<u32>) -> io::Result<()> {
        // A node rebuilt on this backend (the daemon after a failed change) brings a new store:
        // the socket and UMEM over the old one go first. Meanwhile the map's slot is empty and
        // the program passes the node's frames to the kernel, i.e. the UDP socket beside.
        self.close_socket();
        let (area, size) = slots.region();
        let ucfg = sys::xsk_umem_config {
            fill_size: FILL as u32,
            comp_size: IN_FLIGHT as u32,
            frame_size: BUF_STRIDE as u32,
            frame_headroom: 0,
            flags: sys::XDP_UMEM_UNALIGNED_CHUNK_FLAG,
        };
        let r = &mut *self.rings;
        // SAFETY: `area` is page-aligned memory of `size` bytes that `slots` keeps alive (held
        // below until drop); the rings are boxed and outlive the UMEM.
        let rc = unsafe { sys::xsk_umem__create(&mut self.umem, area as *mut _, size as u64, &mut r.fill, &mut r.comp, &ucfg) };
        if rc != 0 {
            self.umem = std::ptr::null_mut();
            return Err(err("registering the packet store as the AF_XDP UMEM", rc));
        }
        self.slots = Some(slots.clone());
        // SAFETY: zeroed config, fields set below.
        let mut scfg: sys::xsk_socket_config = unsafe { std::mem::zeroed() };
        scfg.rx_size = FILL as u32;
        scfg.tx_size = IN_FLIGHT as u32;
        scfg.__bindgen_anon_1.libxdp_flags = sys::XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
        scfg.xdp_flags = self.attached_flags & !XDP_FLAGS_UPDATE_IF_NOEXIST;
        scfg.bind_flags = sys::XDP_USE_NEED_WAKEUP as u16;
        let name = std::ffi::CString::new(self.iface.name.clone()).map_err(io::Error::other)?;
        // The kernel frees a queue's previous socket (a rebuild's, or a node's just stopped) in
        // deferred work: until then the queue is busy. Bounded: 2 s.
        let t0 = std::time::Instant::now();
        let rc = loop {
            // SAFETY: a registered UMEM, boxed rings, a valid name and config.
            let rc =
                unsafe { sys::xsk_socket__create(&mut self.xsk, name.as_ptr(), self.cfg.queue, self.umem, &mut r.rx, &mut r.tx, &scfg) };
            if rc != -libc::EBUSY || t0.elapsed() > Duration::from_secs(2) {
                break rc;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if rc != 0 {
            self.xsk = std::ptr::null_mut();
            return Err(err(&format!("creating the AF_XDP socket on {} queue {}", self.iface.name, self.cfg.queue), rc));
        }
        let fd = self.fd();
        self.prog.set_socket(self.cfg.queue, fd)?;
        // The fill ring's buffers; the rest are the queues' spares.
        let mut lent = lent;
        self.soft.give_spare(lent.split_off(FILL.min(lent.len())));
        let r = &mut *self.rings;
        let mut at = 0;
        // SAFETY: the fill ring of the UMEM just made; `lent` has at most FILL entries.
        unsafe {
            let got = sys::xsk_ring_prod__reserve(&mut r.fill, lent.len() as u32, &mut at);
            for (i, &b) in lent.iter().take(got as usize).enumerate() {
                *sys::xsk_ring_prod__fill_addr(&mut r.fill, at + i as u32) = chunk_of(b);
            }
            sys::xsk_ring_prod__submit(&mut r.fill, got);
        }
        tracing::info!(interface = %self.iface.name, queue = self.cfg.queue, mode = ?self.cfg.mode, local = %self.local, "AF_XDP socket bound");
        Ok(())
    }

    fn recv(&mut self, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        if self.xsk.is_null() {
            return 0;
        }
        let fd = self.fd();
        let r = &mut *self.rings;
        let mut at = 0;
        let mut fat = 0;
        // SAFETY: this thread's rings. Each descriptor names a chunk the fill ring gave the
        // kernel, which is now ours; the buffers we put in the fill ring instead are the node's
        // free ones it lent to this call, which it gives up for those it gets back.
        let n = unsafe {
            let mut n = sys::xsk_ring_cons__peek(&mut r.rx, idx.len() as u32, &mut at);
            if n > 0 {
                // The kernel took `n` buffers from the fill ring to fill them, so it has room
                // for as many; should it not, what it has no room for waits in the ring.
                let got = sys::xsk_ring_prod__reserve(&mut r.fill, n, &mut fat);
                if got < n {
                    sys::xsk_ring_cons__cancel(&mut r.rx, n - got);
                    n = got;
                }
                for i in 0..n as usize {
                    let d = *sys::xsk_ring_cons__rx_desc(&self.rings.rx, at + i as u32);
                    let (b, m) = self.frame_at(slots, &d);
                    *sys::xsk_ring_prod__fill_addr(&mut self.rings.fill, fat + i as u32) = chunk_of(idx[i]);
                    idx[i] = b;
                    meta[i] = m;
                }
                let r = &mut *self.rings;
                sys::xsk_ring_prod__submit(&mut r.fill, got);
                sys::xsk_ring_cons__release(&mut r.rx, n);
            } else if sys::xsk_ring_prod__needs_wakeup(&r.fill) != 0 {
                libc::recvfrom(fd, std::ptr::null_mut(), 0, libc::MSG_DONTWAIT, std::ptr::null_mut(), std::ptr::null_mut());
            }
            n as usize
        };
        let mut n = n;
        self.counters.rx_frames += n as u64;
        // What the kernel reassembled: rare, read once the XDP path is drained.
        while n < idx.len() {
            let Some((len, truncated)) = self.recv_beside(slots, idx[n]) else { break };
            meta[n] = RxMeta { len, truncated, ifindex: self.iface.index, ..RxMeta::default() };
            n += 1;
        }
        n
    }

    fn send(&mut self, slots: &Slots, reqs: &[TxReq]) -> TxResult {
        if self.xsk.is_null() {
            return TxResult { sent: 0, failed: reqs.len() };
        }
        let mut sent = 0;
        while sent < reqs.len() && self.in_flight < IN_FLIGHT {
            // A run of frames whose next hop is known goes to the ring in one reservation.
            let room = IN_FLIGHT - self.in_flight;
            let mut end = sent;
            while end < reqs.len() && end - sent < room && self.resolve(slots, &reqs[end]) {
                end += 1;
            }
            if end > sent {
                let got = self.put_on_ring(&reqs[sent..end]);
                sent += got;
                if got < end - (sent - got) {
                    break; // the ring is full
                }
                continue;
            }
            // The next hop of `reqs[sent]` is unknown: the kernel's stack takes this frame's
            // datagram and resolves the neighbour for the frames after it.
            let q = reqs[sent];
            // SAFETY: the node owns queued transmit buffers.
            let (buf, _) = unsafe { slots.get(q.idx) };
            let dgram = &buf[q.start as usize + OUTER..q.start as usize + q.len as usize];
            match self.udp.send_to(dgram, q.dst) {
                Ok(_) => {
                    self.counters.tx_unresolved += 1;
                    self.done.push(q.idx);
                    self.in_flight += 1;
                    sent += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.kick_tx();
                    return TxResult { sent, failed: 1 };
                }
            }
        }
        if sent > 0 {
            self.kick_tx();
        }
        TxResult { sent, failed: 0 }
    }

    fn keeps_sent(&self) -> bool {
        true
    }

    fn reclaim(&mut self, out: &mut Vec<u32>) {
        out.clear();
        if self.in_flight == 0 {
            return;
        }
        out.append(&mut self.done);
        let Some(slots) = self.slots.as_deref() else { return };
        let r = &mut *self.rings;
        let mut at = 0;
        // SAFETY: this thread's completion ring; each address is one we put in a descriptor.
        unsafe {
            let n = sys::xsk_ring_cons__peek(&mut r.comp, IN_FLIGHT as u32, &mut at);
            for i in 0..n {
                let a = (*sys::xsk_ring_cons__comp_addr(&r.comp, at + i) & ADDR_MASK) as usize;
                out.push(slots.index_at(a).expect("completions name buffers we sent"));
            }
            sys::xsk_ring_cons__release(&mut r.comp, n);
        }
        self.in_flight -= out.len();
        if self.in_flight > 0 {
            // Frames still in the ring after a busy kick.
            self.kick_tx();
        }
    }

    /// The ring's losses, and the tenants' queues'.
    fn rx_dropped(&self) -> u64 {
        self.statistics().map_or(0, |s| s.rx_dropped + s.rx_ring_full) + self.soft.dropped_all()
    }

    /// Queue 0 also counts what the ring lost (tenant-blind).
    fn rx_dropped_queue(&self, q: usize) -> u64 {
        let ring = if q == 0 { self.statistics().map_or(0, |s| s.rx_dropped + s.rx_ring_full) } else { 0 };
        ring + self.soft.dropped(q)
    }

    fn rx_queues(&self) -> usize {
        self.soft.queues()
    }

    /// Per-tenant queues in the backend ([`soft`]), each tenant's VNIs to one.
    fn steer(&mut self, groups: &[Vec<u32>]) -> io::Result<Vec<usize>> {
        Ok(self.soft.steer(groups))
    }

    /// Steered: drains the ring into the queues (at every poll, whatever the node reads) and
    /// says which hold frames; queue 0 is always read (the UDP socket beside feeds it).
    fn ready_queues(&mut self, ready: &mut [bool]) -> bool {
        if !self.soft.steered() || ready.len() < self.soft.queues() {
            return false;
        }
        if let Some(slots) = self.slots.clone() {
            self.drain(&slots);
        }
        for (q, r) in ready.iter_mut().enumerate().take(self.soft.queues()) {
            *r = q == 0 || self.soft.has_frames(q);
        }
        true
    }

    fn recv_queue(&mut self, q: usize, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        if !self.soft.steered() {
            return if q == 0 { self.recv(slots, idx, meta) } else { 0 };
        }
        self.drain(slots);
        let mut n = self.soft.take(q, idx, meta);
        while q == 0 && n < idx.len() {
            let Some((len, truncated)) = self.recv_beside(slots, idx[n]) else { break };
            meta[n] = RxMeta { len, truncated, ifindex: self.iface.index, ..RxMeta::default() };
            n += 1;
        }
        n
    }

    fn set_rx_depth(&mut self, q: usize, packets: Option<usize>, _bytes: usize) {
        self.soft.set_cap(q, packets);
    }

    fn wait(&mut self, timeout: Duration) {
        let ev = libc::POLLIN;
        let mut fds = [
            libc::pollfd { fd: if self.xsk.is_null() { -1 } else { self.fd() }, events: ev, revents: 0 },
            libc::pollfd { fd: self.udp.as_raw_fd(), events: ev, revents: 0 },
            libc::pollfd { fd: self.waker.fd(), events: ev, revents: 0 },
        ];
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: a valid array of pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        self.waker.clear();
    }

    fn waker(&mut self) -> Option<Waker> {
        Some(self.waker.clone())
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(SocketAddr::V4(self.local))
    }

    fn via_kernel(&self) -> (u64, u64) {
        (self.counters.rx_reassembled, self.counters.tx_unresolved)
    }

    fn rx_runs(&self) -> (u64, u64) {
        (self.counters.rx_frames, self.counters.rx_frames)
    }

    fn local_peer(&self) -> Option<crate::store::Peer> {
        Some(crate::store::Peer { addr: SocketAddr::V4(self.local), mac: self.iface.mac })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_framed_datagram_parses_as_the_xdp_path_would_deliver_it() {
        let mut f = vec![0u8; OUTER + 8 + 60];
        f[OUTER] = 0x08; // VXLAN I flag
        f[OUTER + 4..OUTER + 7].copy_from_slice(&[0, 0, 100]);
        let (src, dst) = ("192.0.2.2:40000".parse().unwrap(), "192.0.2.1:4789".parse().unwrap());
        write_outer(&mut f[..OUTER], MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]), src, dst, 68);
        let l = snic_wire::layout::parse_outer(&f).unwrap();
        assert_eq!((l.vni, l.src_port, l.vxlan_len, l.vxlan_off), (100, 40000, 68, 42));
        assert_eq!(l.src_ip, std::net::IpAddr::V4(*src.ip()));
        assert_eq!(l.src_mac, MacAddr([2, 0, 0, 0, 0, 2]));
    }

    #[test]
    fn a_chunk_puts_the_frame_at_the_buffers_headroom() {
        for b in [0u32, 1, 77] {
            let data = chunk_of(b) as usize + XDP_PACKET_HEADROOM;
            assert_eq!(data, crate::store::BUF_BASE + b as usize * BUF_STRIDE + HEADROOM);
        }
    }
}
