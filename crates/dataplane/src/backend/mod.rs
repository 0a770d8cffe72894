//! I/O backends: where packets come from and where they go.
//!
//! A backend receives into packet-store buffers the dispatcher gives it (at
//! [`snic_nt::HEADROOM`]) and transmits byte ranges of buffers. Two framings exist: frame
//! backends move whole Ethernet frames with outer IP/UDP headers (in-memory rings now, AF_XDP
//! later); datagram backends move the VXLAN datagram only and report addresses beside it (UDP
//! sockets).

pub mod cbpf;
pub mod gro;
pub mod mem;
pub mod tap;
pub mod udp;
#[cfg(feature = "af_xdp")]
pub mod xdp;

use crate::store::Slots;
use std::net::SocketAddr;
use std::time::Duration;

/// What a backend's packets look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Whole Ethernet frames (outer headers included).
    Ethernet,
    /// VXLAN datagrams (addresses beside the bytes).
    Datagram,
}

/// Reception metadata of one packet.
#[derive(Debug, Clone, Copy)]
pub struct RxMeta {
    /// Bytes written at `HEADROOM`.
    pub len: u16,
    /// Sender (datagram framing).
    pub src: SocketAddr,
    /// True if the packet did not fit the buffer and was cut.
    pub truncated: bool,
    /// When it arrived, in the node clock's nanoseconds, if the backend knows (a receive
    /// timestamp); 0: when the dispatcher received it. Latency is measured from here.
    pub arrival_ns: u64,
    /// The interface it came in on (its index), if the backend knows; 0 otherwise. The node
    /// checks it against the interface it reaches the sender through (a forged source address
    /// comes in elsewhere: `snic_core::mat::SourceCheck`).
    pub ifindex: u32,
}

impl RxMeta {
    /// When it arrived, in the node clock's nanoseconds: the backend's timestamp, or `now`
    /// (the dispatcher's reception) when it has none.
    #[inline]
    pub fn arrival(&self, now: snic_core::time::Instant) -> u64 {
        if self.arrival_ns != 0 {
            self.arrival_ns
        } else {
            now.as_nanos()
        }
    }
}

impl Default for RxMeta {
    fn default() -> Self {
        RxMeta { len: 0, src: SocketAddr::from(([0, 0, 0, 0], 0)), truncated: false, arrival_ns: 0, ifindex: 0 }
    }
}

/// One packet to transmit: `len` bytes at `start` of buffer `idx`, to `dst` (datagram framing).
#[derive(Debug, Clone, Copy)]
pub struct TxReq {
    /// Buffer.
    pub idx: u32,
    /// First byte.
    pub start: u16,
    /// Length.
    pub len: u16,
    /// Whose packet it is (its transmit counters and store quota).
    pub tenant: snic_core::ids::TenantId,
    /// The VXLAN datagram's length, which the tenant's transmit bytes count.
    pub bytes: u16,
    /// Destination (datagram framing).
    pub dst: SocketAddr,
    /// Its inner TCP or UDP checksum is partial (`snic_wire::tso::finish_partial`): only for a
    /// backend that [`Backend::joins_runs`], which finishes it if the datagram leaves alone.
    pub partial: bool,
}

/// Outcome of a transmit call: the first `sent` requests went out, the next `failed` were
/// refused for good (counted as drops); the rest should be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxResult {
    /// Transmitted.
    pub sent: usize,
    /// Refused (not to be retried).
    pub failed: usize,
}

/// A packet I/O backend.
pub trait Backend: Send {
    /// The framing of this backend's packets.
    fn framing(&self) -> Framing;

    /// Receives up to `idx.len()` packets into those buffers; returns how many, `n`, arrived.
    /// The backend may reorder `idx`: on return `idx[..n]` hold the packets in arrival order,
    /// `meta[i]` describing `idx[i]`, and `idx[n..]` are the buffers it left unfilled. Must not
    /// block.
    fn recv(&mut self, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize;

    /// Transmits a prefix of `reqs`. Must not block.
    fn send(&mut self, slots: &Slots, reqs: &[TxReq]) -> TxResult;

    /// Receive queues (1: one ring every packet shares). A backend with several steers each
    /// arriving packet to a queue before the node sees it — per tenant, by VNI — so that the
    /// node can take from each what its tenant is allowed, and what one tenant sends beyond
    /// that waits, or is lost, in its own queue (FairNIC's per-tenant ingress queues).
    fn rx_queues(&self) -> usize {
        1
    }

    /// Receives from queue `q` only, as [`Backend::recv`]. The default has one queue.
    fn recv_queue(&mut self, q: usize, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        if q == 0 {
            self.recv(slots, idx, meta)
        } else {
            0
        }
    }

    /// Which receive queues have something to read, into `ready` (one flag per queue), if the
    /// backend can tell more cheaply than by reading each; false: read them all.
    fn ready_queues(&mut self, _ready: &mut [bool]) -> bool {
        false
    }

    /// Bounds receive queue `q` to about `packets` packets of about `bytes` each (`None`: its
    /// default depth): what arrives past it is lost in the queue, counted by
    /// [`Backend::rx_dropped_queue`]. The node bounds a limited tenant's own queue in time
    /// (`snic_core::fair::rx_depth`). The default ignores it.
    fn set_rx_depth(&mut self, _q: usize, _packets: Option<usize>, _bytes: usize) {}

    /// Packets lost in queue `q` before the node received them, cumulative (0 if unknown).
    fn rx_dropped_queue(&self, q: usize) -> u64 {
        if q == 0 {
            self.rx_dropped()
        } else {
            0
        }
    }

    /// Packets lost before the node could receive them (a full receive ring or socket buffer),
    /// cumulative; 0 if the backend cannot tell. Fair sharing counts them as load the tenants
    /// intended, in the proportions it did receive.
    fn rx_dropped(&self) -> u64 {
        0
    }

    /// Blocks up to `timeout` for something to receive, or until its [`Waker`] is woken (the
    /// idle path). The default sleeps.
    fn wait(&mut self, timeout: Duration) {
        std::thread::sleep(timeout);
    }

    /// A handle that ends [`Backend::wait`] early, from another thread (the control plane, after
    /// handing the data plane a command); `None` if the backend cannot be woken: then its
    /// waits must stay short.
    fn waker(&mut self) -> Option<Waker> {
        None
    }

    /// Steers each group of VNIs to a receive queue of its own (a tenant's VNIs, one group per
    /// tenant) and returns each group's queue (0: the shared one). An empty list undoes any
    /// steering. The default has one queue: it refuses any group, naming why.
    fn steer(&mut self, groups: &[Vec<u32>]) -> std::io::Result<Vec<usize>> {
        match groups.is_empty() {
            true => Ok(Vec::new()),
            false => Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this backend has one receive queue: it cannot steer tenants apart",
            )),
        }
    }

    /// Stops (`true`) or resumes reporting queue `q` readable in [`Backend::wait`] and
    /// [`Backend::ready_queues`]: a tenant's own queue its ingress limit holds is not read, and
    /// a wait that it woke at once would spin. The default has nothing to stop.
    fn pause_queue(&mut self, _q: usize, _paused: bool) {}

    /// Which dispatcher thread each datagram goes to, for a node of several
    /// ([`snic_core::steer`]): its tenants' NATs. The default has one thread and accepts only
    /// that.
    fn set_steering(&mut self, s: &snic_core::steer::Steering) -> std::io::Result<()> {
        one_thread(s)
    }

    /// The address the node receives on (its VTEP), if it has one.
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "this backend has no socket address"))
    }

    /// This node's own VTEP as frames carry it (address and MAC), for a backend of Ethernet
    /// framing that knows its interface: the node writes it as every outer header's source.
    /// The default: none (the node's configured one stands).
    fn local_peer(&self) -> Option<crate::store::Peer> {
        None
    }

    /// Packets received and sent through the kernel's own stack beside a bypass path,
    /// cumulative (AF_XDP: reassembled outer fragments in, frames to unresolved next hops
    /// out). The default: none.
    fn via_kernel(&self) -> (u64, u64) {
        (0, 0)
    }

    /// Receive calls' entries and the packets they carried, cumulative: more packets than
    /// entries when runs arrive coalesced ([`gro`]). The default counts one packet an entry,
    /// and none.
    fn rx_runs(&self) -> (u64, u64) {
        (0, 0)
    }

    /// Runs sent joined into one TCP super-packet ([`tap`]), the datagrams they carried, and
    /// joined runs the kernel refused (sent as datagrams instead), cumulative (none by default).
    fn tx_joined(&self) -> (u64, u64, u64) {
        (0, 0, 0)
    }

    /// True if it may send runs of datagrams joined into one TCP super-packet ([`tap`]): it
    /// then takes datagrams whose inner checksum is still partial ([`TxReq::partial`]) and
    /// finishes those it sends alone. The default: false (the node finishes them first).
    fn joins_runs(&self) -> bool {
        false
    }

    /// The largest datagram sent with segmentation offload, lowered when the path refuses a
    /// size (0: the backend has no segmentation offload).
    fn gso_max_segment(&self) -> usize {
        0
    }

    /// Buffers this backend holds outside the store's accounting: `(lent, in_flight)` — lent
    /// to it for good at [`Backend::attach`] (to receive into), and at most transmitted and
    /// not yet given back ([`Backend::keeps_sent`]). The node sizes its store that much larger.
    /// The default holds none.
    fn held_buffers(&self) -> (usize, usize) {
        (0, 0)
    }

    /// Called once by the node with its store and the [`Backend::held_buffers`] lent to the
    /// backend, before any other call: a backend that receives into the store's memory
    /// itself (AF_XDP's UMEM) registers it here. It keeps `slots` alive while the kernel may
    /// write into it. The default does nothing.
    fn attach(&mut self, _slots: &std::sync::Arc<Slots>, _lent: Vec<u32>) -> std::io::Result<()> {
        Ok(())
    }

    /// True if transmitted buffers stay the backend's until the kernel is done with them (the
    /// node then does not free them; [`Backend::reclaim`] gives them back). The default copies
    /// what it sends: false.
    fn keeps_sent(&self) -> bool {
        false
    }

    /// Appends to `out` buffers the backend gives back to the store (transmissions the kernel
    /// completed). The default keeps none.
    fn reclaim(&mut self, _out: &mut Vec<u32>) {}
}

/// Wakes a data-plane thread blocked in [`Backend::wait`]: an eventfd the backend's wait also
/// watches.
#[derive(Debug, Clone)]
pub struct Waker(std::sync::Arc<std::os::fd::OwnedFd>);

impl Waker {
    /// A new eventfd.
    pub fn new() -> std::io::Result<Waker> {
        use std::os::fd::FromRawFd;
        // SAFETY: no preconditions; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(Waker(std::sync::Arc::new(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })))
    }

    /// Wakes the waiting thread (or its next wait, if it is not waiting now).
    pub fn wake(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to a descriptor we own. A full counter
        // (EAGAIN) already means "woken".
        let _ = unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
    }

    /// Takes the wake-up, so that the next wait blocks again.
    pub fn clear(&self) {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from a descriptor we own (non-blocking).
        let _ = unsafe { libc::read(self.fd(), (&mut n as *mut u64).cast(), 8) };
    }

    /// The eventfd, to watch.
    pub fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.0.as_raw_fd()
    }
}

/// A backend of one dispatcher thread: accepts steering for one thread only.
pub(crate) fn one_thread(s: &snic_core::steer::Steering) -> std::io::Result<()> {
    match s.threads {
        0 | 1 => Ok(()),
        n => Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!("this backend has one dispatcher thread, not {n}: bind it with UdpBackend::bind_threads"),
        )),
    }
}
