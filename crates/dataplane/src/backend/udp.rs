//! Batched UDP sockets: the portable default backend. One `recvmmsg` fills up to a batch of
//! packet buffers, one `sendmmsg` sends a batch. The socket is non-blocking; the idle path
//! blocks in `epoll_pwait2(2)` for as long as the node asks — to the nanosecond, the thread's
//! timer slack set to 5 µs — so that a 100 µs epoch does not close up to 1 ms late, as the
//! whole-millisecond `epoll_wait(2)` it falls back to on a kernel before 5.11 would
//! (`snic bench wake` measures both).
//!
//! On transmit, runs of datagrams of one size to one destination go out as a single message with
//! UDP generic segmentation offload (`UDP_SEGMENT`): the buffers are passed as an iovec list (no
//! copy) and the kernel walks its UDP/IP/device path once per run instead of once per datagram —
//! the per-datagram kernel path dominated a two-node VPC (80% of a node's time in `sendmmsg`).
//! If the kernel refuses segmentation, the backend falls back to one datagram per message.
//!
//! **Datagrams larger than the path's MTU** (an endpoint whose VXLAN device has the underlay's
//! 1500-byte MTU sends inner frames that make 1550-byte outer packets; an NT that adds bytes
//! makes more): the data sockets never set DF (`IP_PMTUDISC_DONT`), so the kernel fragments
//! such a datagram on its way out, as a kernel VXLAN device does; the receiver reassembles it.
//! Segmentation cannot split a segment over the MTU: a group the kernel refuses for its size
//! (`EMSGSIZE`, `EINVAL`) is sent again at once as single datagrams, and from then on segments
//! of that size or more are not grouped ([`UdpBackend::gso_max_segment`]). One datagram the
//! kernel refuses costs that datagram only (`tx_error`), never the rest of its batch.
//!
//! **Per-tenant receive queues** ([`UdpBackend::bind_steered`], [`UdpBackend::steer`]): a group
//! of sockets on one address (`SO_REUSEPORT`) with a classic BPF program attached to the group
//! (`SO_ATTACH_REUSEPORT_CBPF`) that reads each datagram's VXLAN VNI and picks the socket of the
//! tenant that owns it (socket 0 for any other). Each tenant's datagrams then queue in a socket
//! buffer of their own: the node reads from each only what the tenant's ingress limit admits,
//! and a flood fills — and is dropped at — its own socket, in the kernel, without costing the
//! dispatcher a receive or delaying other tenants' datagrams behind it.
//!
//! Datagrams the socket drops before snic reads them are counted with `SO_MEMINFO` (the
//! socket's drop counter, read once per fair-sharing epoch), not with `SO_RXQ_OVFL` on every
//! datagram: on the 6.18 kernel of our test machines, copying the `SO_RXQ_OVFL` control message
//! out trips the kernel's hardened-usercopy check once the socket has dropped datagrams (an oops
//! in `put_cmsg`, "Kernel memory exposure attempt detected"), which kills the receiving thread —
//! the daemon's data plane died under a flood that way.

use super::{cbpf, gro, Backend, Framing, RxMeta, TxReq, TxResult};
use crate::store::{Slots, MAX_BATCH};
use snic_core::steer::Steering;
use snic_nt::HEADROOM;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// `SO_MEMINFO` (asm-generic/socket.h) and the number of counters it returns (`SK_MEMINFO_VARS`).
const SO_MEMINFO: i32 = 55;
const SK_MEMINFO_VARS: usize = 9;

/// `SOL_UDP` / `UDP_SEGMENT` (linux/udp.h).
const SOL_UDP: i32 = 17;
const UDP_SEGMENT: i32 = 103;
/// `UDP_GRO` (linux/udp.h): receive coalesced runs ([`super::gro`]).
const UDP_GRO: i32 = 104;
/// Most segments in one GSO message (the kernel's `UDP_MAX_SEGMENTS`).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most payload bytes in one GSO message (an IP datagram's limit, headers aside).
const GSO_MAX_BYTES: usize = 65_000;
/// Segments at least this large are always grouped: a refusal below it is not about the size
/// (no path has a smaller MTU), so segmentation is turned off instead.
const MIN_GSO_SEGMENT: usize = 512;

/// Room for one `UDP_SEGMENT` control message (CMSG_SPACE(2) is 24 on 64-bit Linux).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Cmsg([u8; 32]);

/// Room for the control messages a received datagram carries: its `IP_PKTINFO`
/// (CMSG_SPACE(12) = 32) or `IPV6_PKTINFO` (CMSG_SPACE(20) = 40), and a run's `UDP_GRO`
/// (CMSG_SPACE(4) = 16).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct RxCmsg([u8; 64]);

/// A receive queue beyond the first: a socket of the group, and its drop counter.
struct Queue {
    sock: UdpSocket,
    dropped: Drops,
}

/// A socket's drop counter: cumulative, from the kernel's 32-bit reading.
#[derive(Default)]
struct Drops {
    total: std::cell::Cell<u64>,
    last: std::cell::Cell<u32>,
}

impl Drops {
    fn read(&self, fd: i32) -> u64 {
        if let Some(v) = socket_drops(fd) {
            self.total.set(self.total.get() + v.wrapping_sub(self.last.get()) as u64);
            self.last.set(v);
        }
        self.total.get()
    }
}

/// The sockets' buffers, bytes (a queue bounded for a limited tenant is smaller: `set_rx_depth`).
const RX_BUFFER: usize = 4 << 20;

/// Most receive queues (sockets) a steered backend opens; tenants past that share queue 0.
pub const MAX_QUEUES: usize = 64;

/// From this many queues on, the node asks which are ready (one `epoll_wait(2)`) before
/// reading.
const POLL_READY_FROM: usize = 4;

/// A UDP socket backend.
pub struct UdpBackend {
    sock: UdpSocket,
    /// Receive queues 1.. of a steered backend (queue 0 is `sock`).
    queues: Vec<Queue>,
    /// A steered backend: `sock` is in a reuseport group with a steering program.
    steered: bool,
    /// One of a node's dispatcher threads (`data_cores`): the group they share, and this
    /// thread's number in it.
    threads: Option<(std::sync::Arc<Group>, usize)>,
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<Cmsg>,
    rx_cmsgs: Vec<RxCmsg>,
    /// Receive: each message's packet buffer and overflow buffer.
    rx_iovs: Vec<[libc::iovec; 2]>,
    /// Coalesced runs received, split into datagrams.
    gro: gro::GroRx,
    msgs: Vec<gro::Msg>,
    /// Datagrams carried by each message of the last send.
    group: Vec<usize>,
    gso: bool,
    /// Segments up to this size are grouped for segmentation; larger ones (which the kernel
    /// refused to segment: over the path's MTU) go one per message.
    gso_max_seg: usize,
    /// Datagrams `sock` dropped (`SO_MEMINFO`).
    rx_dropped: Drops,
    /// An epoll instance holding every receive queue (event data: the queue's index): asking
    /// which queues are ready costs the ready ones, not all of them (`poll(2)` over 64 sockets
    /// did, on every poll of the node).
    epoll: std::os::fd::OwnedFd,
    events: Vec<libc::epoll_event>,
    /// Ends a wait early (watched by `epoll` as [`WAKE`]), once asked for.
    waker: Option<super::Waker>,
    /// How an idle wait is timed: to the nanosecond (`epoll_pwait2`), or — on a kernel without
    /// it (before 5.11) — rounded up to whole milliseconds (`epoll_wait`).
    wait_clock: WaitClock,
    /// The waiting thread's timer slack was set ([`WAIT_SLACK_NS`]).
    slack_set: bool,
    /// Runs of one TCP flow leave joined, through this tap ([`super::tap`]).
    tap: Option<super::tap::TunnelTap>,
    /// The first datagrams of the next send that are not joined (a run the tap refused).
    no_join: usize,
}

/// How the idle wait is timed ([`UdpBackend::set_wait_clock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitClock {
    /// `epoll_pwait2(2)`: the timeout as given, to the nanosecond, with the thread's timer slack
    /// at [`WAIT_SLACK_NS`].
    Fine,
    /// `epoll_wait(2)`: rounded up to whole milliseconds (a 100 µs timeout waits 1 ms).
    Millis,
}

/// The timer slack of a thread that waits in the backend: the kernel may wake it this much
/// after the timeout it asked for (50 µs by default: half a short epoch).
pub const WAIT_SLACK_NS: u64 = 5_000;

/// The epoll event data of the waker (queues are 0..MAX_QUEUES).
const WAKE: usize = usize::MAX;

/// Adds `fd` to epoll instance `ep`, reporting `q` when it is readable.
fn epoll_add(ep: i32, fd: i32, q: usize) -> io::Result<()> {
    epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, q, libc::EPOLLIN as u32)
}

fn epoll_ctl(ep: i32, op: i32, fd: i32, q: usize, events: u32) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: q as u64 };
    // SAFETY: both descriptors are open; `ev` is a valid event.
    if unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// SAFETY: the raw pointers inside the mmsghdr/iovec arrays point into this struct's own vectors
// or into store buffers during a call; they are rebuilt on every call and never shared.
unsafe impl Send for UdpBackend {}

impl core::fmt::Debug for UdpBackend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("UdpBackend").field("local", &self.sock.local_addr().ok()).finish()
    }
}

fn setsockopt_int(fd: i32, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live i32 and its size.
    let r = unsafe { libc::setsockopt(fd, level, name, &v as *const i32 as *const libc::c_void, size_of::<i32>() as u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl UdpBackend {
    /// Binds `addr` (use port 4789 for VXLAN), non-blocking, with 4 MiB socket buffers: one
    /// receive queue.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let sock = UdpSocket::bind(addr)?;
        Self::with_socket(sock, false)
    }

    /// Binds `addr` as the first socket of a reuseport group whose datagrams a steering program
    /// sends to per-tenant receive queues ([`UdpBackend::steer`]; until then, all to queue 0).
    /// Fails with `AddrInUse` if anything already holds the address — another snic included,
    /// which would otherwise join the group and silently take part of the traffic.
    pub fn bind_steered(addr: SocketAddr) -> io::Result<Self> {
        // A plain bind first: it conflicts with any socket on the address, reuseport or not
        // (and resolves port 0).
        let addr = UdpSocket::bind(addr)?.local_addr()?;
        let sock = reuseport_socket(addr)?;
        attach_program(sock.as_raw_fd(), &cbpf::vni_program(&[]))?;
        Self::with_socket(sock, true)
    }

    /// Binds `addr` for a node of `threads` dispatcher threads (`data_cores`): one backend per
    /// thread, all in one reuseport group whose program gives each datagram to a thread by
    /// [`snic_core::steer`]'s rule ([`Backend::set_steering`] gives it the tenants' NATs) and,
    /// `steered`, to that thread's receive queue of the datagram's tenant ([`Backend::steer`]).
    /// Fails with `AddrInUse` if anything already holds the address.
    pub fn bind_threads(addr: SocketAddr, threads: usize, steered: bool) -> io::Result<Vec<Self>> {
        let threads = threads.max(1);
        let addr = UdpSocket::bind(addr)?.local_addr()?;
        let socks = (0..threads).map(|_| reuseport_socket(addr)).collect::<io::Result<Vec<_>>>()?;
        let steering = Steering { threads: threads as u16, claims: Vec::new() };
        attach_program(socks[0].as_raw_fd(), &cbpf::thread_program(&[], &steering)?)?;
        let group = std::sync::Arc::new(Group {
            addr,
            threads,
            state: std::sync::Mutex::new(GroupState { made: Vec::new(), map: Vec::new(), steering }),
        });
        socks
            .into_iter()
            .enumerate()
            .map(|(k, sock)| {
                let mut b = Self::with_socket(sock, steered)?;
                b.threads = Some((group.clone(), k));
                Ok(b)
            })
            .collect()
    }

    fn with_socket(sock: UdpSocket, steered: bool) -> io::Result<Self> {
        tune(&sock)?;
        // SAFETY: no preconditions; a non-negative result is a new descriptor we own.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `ep` was just opened and is owned by nothing else.
        let epoll = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(ep) };
        epoll_add(ep, sock.as_raw_fd(), 0)?;
        // SAFETY: all-zero is a valid value for these plain C structs.
        let (hdrs, iovs, addrs) = unsafe { (vec![zeroed(); MAX_BATCH], vec![zeroed(); MAX_BATCH], vec![zeroed(); MAX_BATCH]) };
        Ok(UdpBackend {
            sock,
            queues: Vec::new(),
            steered,
            threads: None,
            hdrs,
            iovs,
            addrs,
            cmsgs: vec![Cmsg([0; 32]); MAX_BATCH],
            rx_cmsgs: vec![RxCmsg([0; 64]); MAX_BATCH],
            // SAFETY: all-zero is a valid iovec.
            rx_iovs: vec![unsafe { zeroed() }; MAX_BATCH],
            gro: gro::GroRx::default(),
            msgs: Vec::with_capacity(MAX_BATCH),
            group: vec![0; MAX_BATCH],
            gso: true,
            gso_max_seg: GSO_MAX_BYTES,
            rx_dropped: Drops::default(),
            epoll,
            // (One more for the waker.)
            events: vec![libc::epoll_event { events: 0, u64: 0 }; MAX_QUEUES + 1],
            waker: None,
            wait_clock: WaitClock::Fine,
            slack_set: false,
            tap: None,
            no_join: 0,
        })
    }

    /// Adds `sock` as the next receive queue.
    fn add_queue(&mut self, sock: UdpSocket) -> io::Result<()> {
        tune(&sock)?;
        epoll_add(self.epoll.as_raw_fd(), sock.as_raw_fd(), self.queues.len() + 1)?;
        self.queues.push(Queue { sock, dropped: Drops::default() });
        Ok(())
    }

    fn queue_fd(&self, q: usize) -> Option<i32> {
        match q {
            0 => Some(self.sock.as_raw_fd()),
            _ => self.queues.get(q - 1).map(|x| x.sock.as_raw_fd()),
        }
    }

    /// Waits up to `timeout_ms` for a readable queue; the ready ones are in `events[..k]`
    /// (`k` < 0: the call failed).
    fn epoll_wait(&mut self, timeout_ms: i32) -> i32 {
        // SAFETY: `events` has room for `events.len()` entries; the epoll descriptor is ours.
        unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), self.events.as_mut_ptr(), self.events.len() as i32, timeout_ms) }
    }

    /// Waits up to `timeout` for a readable queue, timed as [`UdpBackend::wait_clock`] says (a
    /// kernel or a seccomp filter that refuses `epoll_pwait2` turns it to [`WaitClock::Millis`]
    /// for good).
    fn epoll_wait_for(&mut self, timeout: Duration) -> i32 {
        if self.wait_clock == WaitClock::Fine {
            if !self.slack_set {
                // SAFETY: PR_SET_TIMERSLACK takes a value and touches no memory of ours.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, WAIT_SLACK_NS as libc::c_ulong) };
                self.slack_set = true;
            }
            let ts = libc::timespec {
                tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // SAFETY: as `epoll_wait`, with a valid timespec and no signal mask (NULL, size 0).
            let k = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.epoll.as_raw_fd(),
                    self.events.as_mut_ptr(),
                    self.events.len() as libc::c_int,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            } as i32;
            // A kernel without it says ENOSYS; a seccomp filter that does not know it may say
            // EPERM (older container runtimes) — any error but an interrupted wait would make
            // every wait return at once, a busy loop: wait in whole milliseconds from then on.
            if k >= 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                return k;
            }
            self.wait_clock = WaitClock::Millis;
        }
        // Rounded up to whole milliseconds (epoll's unit).
        let ms = timeout.as_nanos().div_ceil(1_000_000).clamp(1, i32::MAX as u128) as i32;
        self.epoll_wait(ms)
    }

    /// How an idle wait is timed now.
    pub fn wait_clock(&self) -> WaitClock {
        self.wait_clock
    }

    /// Times idle waits with `clock`: `Millis` is what a kernel without `epoll_pwait2` gets,
    /// chosen here to measure it (`snic bench wake`).
    pub fn set_wait_clock(&mut self, clock: WaitClock) {
        self.wait_clock = clock;
    }

    /// Whether transmit uses UDP segmentation offload (until the kernel refuses it).
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Turns segmentation offload off (it is on by default).
    pub fn set_gso(&mut self, on: bool) {
        self.gso = on;
    }

    /// Sends runs of one TCP flow joined through `tap` from now ([`super::tap`]); `None`: out
    /// of the socket, as by default.
    pub fn set_egress_tap(&mut self, tap: Option<super::tap::TunnelTap>) {
        // (Segments it may join are cut with their checksums partial: no sum over the payload
        // for those the tap's device finishes; the others are finished as they leave.)
        self.gro.cut_partial = tap.is_some();
        self.tap = tap;
    }

    /// The tap runs leave through, if any.
    pub fn egress_tap(&self) -> Option<&super::tap::TunnelTap> {
        self.tap.as_ref()
    }

    /// One `sendmmsg` of `reqs` (at most a batch): what it did, and whether to try again at once
    /// (a group the kernel refused for its size: its segment size is no longer grouped).
    fn send_once(&mut self, slots: &Slots, reqs: &[TxReq]) -> (TxResult, bool) {
        let n = reqs.len().min(MAX_BATCH);
        if n == 0 {
            return (TxResult::default(), false);
        }
        for (i, rq) in reqs[..n].iter().enumerate() {
            // SAFETY: the dispatcher owns buffers it passes to `send`.
            let (buf, _) = unsafe { slots.get(rq.idx) };
            self.iovs[i] = libc::iovec { iov_base: buf[rq.start as usize..].as_mut_ptr() as *mut libc::c_void, iov_len: rq.len as usize };
        }
        // SAFETY: the dispatcher owns buffers it passes to `send`; the kernel only reads them.
        let datagram = |rq: &TxReq| unsafe { &slots.get(rq.idx).0[rq.start as usize..][..rq.len as usize] };
        // Group runs for segmentation: same destination, same size (the last may be shorter).
        // A run that joins into one TCP super-packet goes through the tap instead, after the
        // messages before it (`joined`).
        let (mut m, mut i, mut joined) = (0, 0, None);
        while i < n {
            let seg = reqs[i].len as usize;
            let mut j = i + 1;
            if self.gso && seg > 0 && seg <= self.gso_max_seg {
                let cap = (GSO_MAX_BYTES / seg).clamp(1, GSO_MAX_SEGMENTS);
                while j < n && j - i < cap && reqs[j].dst == reqs[i].dst && reqs[j].len as usize <= seg {
                    j += 1;
                    if (reqs[j - 1].len as usize) < seg {
                        break;
                    }
                }
            }
            // (A join is bounded by what one super-packet holds, not by the segmentation group:
            // the datagrams to the same destination from here, as many as there are.)
            let two = i + 1 < n && reqs[i + 1].dst == reqs[i].dst;
            if let (Some(tap), SocketAddr::V4(dst), true) = (&mut self.tap, reqs[i].dst, two && i >= self.no_join) {
                let run = &reqs[i..n];
                let same_dst = run.iter().take_while(|r| r.dst == run[0].dst).count();
                if let Some((jn, src)) = tap.join(dst, same_dst, |x| datagram(&run[x])) {
                    joined = Some((i, jn, src, dst));
                    break;
                }
            }
            for rq in reqs[i..j].iter().filter(|r| r.partial) {
                // SAFETY: the dispatcher owns buffers it passes to `send`; nothing else
                // references this one now (the iovec is read by the call below only).
                let d = unsafe { &mut slots.get(rq.idx).0[rq.start as usize..][..rq.len as usize] };
                snic_wire::tso::finish_partial(d);
            }
            let alen = to_sockaddr(&reqs[i].dst, &mut self.addrs[m]);
            let h = &mut self.hdrs[m].msg_hdr;
            h.msg_name = &mut self.addrs[m] as *mut _ as *mut libc::c_void;
            h.msg_namelen = alen;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = j - i;
            h.msg_flags = 0;
            if j - i > 1 {
                let c = &mut self.cmsgs[m];
                h.msg_control = c.0.as_mut_ptr() as *mut libc::c_void;
                // SAFETY: CMSG_SPACE/CMSG_LEN are pure size computations.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
                // SAFETY: the control buffer is 32 bytes, aligned to 8, and msg_controllen says
                // it holds one CMSG_SPACE(2) message, so CMSG_FIRSTHDR is non-null and in bounds.
                unsafe {
                    let cm = libc::CMSG_FIRSTHDR(h);
                    (*cm).cmsg_level = SOL_UDP;
                    (*cm).cmsg_type = UDP_SEGMENT;
                    (*cm).cmsg_len = libc::CMSG_LEN(2) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cm) as *mut u16, seg as u16);
                }
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
            self.group[m] = j - i;
            m += 1;
            i = j;
        }
        let r = if m == 0 {
            0
        } else {
            // SAFETY: every header points at live iovecs into owned buffers, a live address and
            // (for groups) a live control buffer; `m` is within the arrays.
            unsafe { libc::sendmmsg(self.sock.as_raw_fd(), self.hdrs.as_mut_ptr(), m as u32, libc::MSG_DONTWAIT) }
        };
        if r >= 0 {
            let sent = self.group[..r as usize].iter().sum();
            // The run that joins goes once all before it went.
            if let (Some((at, jn, src, dst)), true) = (joined, r as usize == m) {
                let run = &reqs[at..];
                let tap = self.tap.as_mut().expect("joined through it");
                if tap.write(&jn, src, dst, |x| datagram(&run[x])).is_ok() {
                    self.no_join = 0;
                    return (TxResult { sent: at + jn.count, failed: 0 }, false);
                }
                // (Refused: the run goes out of the socket, at once, as the next send's first.)
                self.no_join = jn.count;
                return (TxResult { sent, failed: 0 }, sent == 0);
            }
            self.no_join = 0;
            return (TxResult { sent, failed: 0 }, false);
        }
        let grouped = self.gso && self.group[0] > 1;
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => (TxResult::default(), false),
            // A segment over the path's MTU cannot be segmented: this size and larger go one
            // datagram per message from now (the kernel fragments them), and the group again.
            Some(libc::EMSGSIZE) | Some(libc::EINVAL) if grouped && reqs[0].len as usize > MIN_GSO_SEGMENT => {
                self.gso_max_seg = reqs[0].len as usize - 1;
                (TxResult::default(), true)
            }
            // The kernel or device refuses segmentation at all: plain datagrams from now.
            Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) | Some(libc::EMSGSIZE) if grouped => {
                self.gso = false;
                (TxResult::default(), true)
            }
            // Anything else (unreachable, bad address, a single datagram refused) is about the
            // first message alone: drop its datagrams so the queue moves on.
            _ => (TxResult { sent: 0, failed: self.group[0] }, false),
        }
    }
}

/// Non-blocking, with 4 MiB socket buffers (larger buffers absorb bursts; failures, i.e.
/// limits, are not fatal).
fn tune(sock: &UdpSocket) -> io::Result<()> {
    sock.set_nonblocking(true)?;
    set_buffers(sock, RX_BUFFER);
    // Each datagram says which interface it came in on (a forged source address comes in on
    // another than the one the node reaches it through; `RxMeta::ifindex`). A family the socket
    // is not of refuses its option: harmless.
    let fd = sock.as_raw_fd();
    let _ = setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1);
    let _ = setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1);
    // Never DF: a datagram over the path's MTU is fragmented by the kernel on its way out (as a
    // kernel VXLAN device's are), not refused (see the module docs).
    let _ = setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DONT);
    let _ = setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IP_PMTUDISC_DONT);
    // Coalesced runs, where the receiving interface has GRO (a kernel without it refuses:
    // datagrams then come one per message, as without GRO).
    let _ = setsockopt_int(fd, SOL_UDP, UDP_GRO, 1);
    Ok(())
}

/// The arrival interface (0 if none says) and the coalesced run's datagram size (`UDP_GRO`; 0:
/// one datagram) in a received message's control messages.
fn rx_info(h: &libc::msghdr) -> (u32, usize) {
    let (mut ifindex, mut seg) = (0, 0);
    // SAFETY: `h` is a message header the kernel filled on `recvmmsg`: its control buffer and
    // length are valid, and the CMSG_* walk stays within `msg_controllen`.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(h);
        while !cm.is_null() {
            match ((*cm).cmsg_level, (*cm).cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    ifindex = std::ptr::read_unaligned(libc::CMSG_DATA(cm) as *const libc::in_pktinfo).ipi_ifindex as u32;
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    ifindex = std::ptr::read_unaligned(libc::CMSG_DATA(cm) as *const libc::in6_pktinfo).ipi6_ifindex;
                }
                (SOL_UDP, UDP_GRO) => {
                    seg = std::ptr::read_unaligned(libc::CMSG_DATA(cm) as *const libc::c_int).max(0) as usize;
                }
                _ => {}
            }
            cm = libc::CMSG_NXTHDR(h, cm);
        }
    }
    (ifindex, seg)
}

/// Asks for `bytes` of receive and send buffer on `sock` (the kernel caps it at
/// `net.core.rmem_max`/`wmem_max`; a refusal is not an error: the socket keeps its buffers).
/// For endpoints that must absorb bursts while their thread is off its core, as the node's own
/// sockets do.
pub fn set_buffers(sock: &UdpSocket, bytes: usize) {
    let fd = sock.as_raw_fd();
    let b = bytes.min(i32::MAX as usize) as i32;
    let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, b);
    let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, b);
}

/// A UDP socket bound to `addr` with `SO_REUSEPORT` set first, so that the sockets bound after
/// it join its group.
fn reuseport_socket(addr: SocketAddr) -> io::Result<UdpSocket> {
    use std::os::fd::FromRawFd;
    let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket we own; the UdpSocket closes it, also on the error paths.
    let sock = unsafe { UdpSocket::from_raw_fd(fd) };
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut sa: libc::sockaddr_storage = unsafe { zeroed() };
    let len = to_sockaddr(&addr, &mut sa);
    // SAFETY: `sa` holds an address of `len` bytes.
    if unsafe { libc::bind(fd, &sa as *const _ as *const libc::sockaddr, len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// Attaches (or replaces) the reuseport group's steering program through member `fd`.
fn attach_program(fd: i32, prog: &[cbpf::Insn]) -> io::Result<()> {
    if prog.len() > cbpf::MAX_INSNS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many VNIs to steer (at most 2046)"));
    }
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut libc::sock_filter };
    // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies the program.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const _ as *const libc::c_void,
            size_of::<libc::sock_fprog>() as u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The reuseport group of a node's dispatcher threads ([`UdpBackend::bind_threads`]): socket
/// `q·threads + k` of the group is thread `k`'s receive queue `q`. The sockets of a queue are
/// made for every thread at once, in that order (the kernel numbers a group's sockets as they
/// join), by whichever thread steers first; each thread takes its own.
pub struct Group {
    addr: SocketAddr,
    threads: usize,
    state: std::sync::Mutex<GroupState>,
}

struct GroupState {
    /// The sockets of queues 1.. that their thread has not taken yet: `made[q - 1][k]`.
    made: Vec<Vec<Option<UdpSocket>>>,
    /// VNI → queue, as last steered.
    map: Vec<(u32, u32)>,
    steering: Steering,
}

impl Group {
    fn state(&self) -> std::sync::MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl GroupState {
    /// Makes the sockets of queues up to `n` for every thread. A failure closes the sockets of
    /// the unfinished queue last first, so that the group's numbering stays as it was.
    fn make(&mut self, addr: SocketAddr, threads: usize, n: usize) -> io::Result<()> {
        while self.made.len() < n {
            let mut row = Vec::with_capacity(threads);
            for _ in 0..threads {
                match reuseport_socket(addr) {
                    Ok(s) => row.push(Some(s)),
                    Err(e) => {
                        while let Some(s) = row.pop() {
                            drop(s);
                        }
                        return Err(e);
                    }
                }
            }
            self.made.push(row);
        }
        Ok(())
    }
}

fn to_sockaddr(a: &SocketAddr, out: &mut libc::sockaddr_storage) -> u32 {
    match a {
        SocketAddr::V4(v) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let s = unsafe { &mut *(out as *mut _ as *mut libc::sockaddr_in) };
            s.sin_family = libc::AF_INET as u16;
            s.sin_port = v.port().to_be();
            s.sin_addr = libc::in_addr { s_addr: u32::from_ne_bytes(v.ip().octets()) };
            size_of::<libc::sockaddr_in>() as u32
        }
        SocketAddr::V6(v) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let s = unsafe { &mut *(out as *mut _ as *mut libc::sockaddr_in6) };
            s.sin6_family = libc::AF_INET6 as u16;
            s.sin6_port = v.port().to_be();
            s.sin6_addr = libc::in6_addr { s6_addr: v.ip().octets() };
            s.sin6_flowinfo = 0;
            s.sin6_scope_id = v.scope_id();
            size_of::<libc::sockaddr_in6>() as u32
        }
    }
}

fn from_sockaddr(s: &libc::sockaddr_storage) -> SocketAddr {
    match s.ss_family as i32 {
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let v = unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
            SocketAddr::V6(SocketAddrV6::new(v.sin6_addr.s6_addr.into(), u16::from_be(v.sin6_port), 0, v.sin6_scope_id))
        }
        _ => {
            // SAFETY: the kernel wrote an AF_INET address (the only other family on this socket).
            let v = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
            SocketAddr::V4(SocketAddrV4::new(v.sin_addr.s_addr.to_ne_bytes().into(), u16::from_be(v.sin_port)))
        }
    }
}

/// The socket's drop counter (`SK_MEMINFO_DROPS` of `SO_MEMINFO`), if the kernel tells.
fn socket_drops(fd: i32) -> Option<u32> {
    let mut m = [0u32; SK_MEMINFO_VARS];
    let mut len = size_of::<[u32; SK_MEMINFO_VARS]>() as libc::socklen_t;
    // SAFETY: passes a live buffer and its size; the kernel writes at most `len` bytes.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, SO_MEMINFO, m.as_mut_ptr() as *mut libc::c_void, &mut len) };
    let drops = libc::SK_MEMINFO_DROPS as usize;
    (r == 0 && len as usize > drops * size_of::<u32>()).then_some(m[drops])
}

impl Backend for UdpBackend {
    /// Steers each group of VNIs to a receive queue of its own: group `i` to queue `i + 1`
    /// (sockets are added to the reuseport group as needed, and kept); every other VNI to
    /// queue 0. Groups past [`MAX_QUEUES`] − 1 go to queue 0 too. Returns the queue of each group.
    /// A backend from [`UdpBackend::bind`] has one queue and refuses.
    fn steer(&mut self, groups: &[Vec<u32>]) -> io::Result<Vec<usize>> {
        if !self.steered {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "a backend bound without steering has one receive queue"));
        }
        let n = groups.len().min(MAX_QUEUES - 1);
        let map: Vec<(u32, u32)> = groups.iter().take(n).enumerate().flat_map(|(i, g)| g.iter().map(move |&v| (v, i as u32 + 1))).collect();
        if let Some((group, k)) = self.threads.clone() {
            let mut g = group.state();
            g.make(group.addr, group.threads, n)?;
            attach_program(self.sock.as_raw_fd(), &cbpf::thread_program(&map, &g.steering)?)?;
            g.map = map;
            while self.queues.len() < n {
                let q = self.queues.len();
                let sock = g.made[q][k].take().ok_or_else(|| io::Error::other("a thread's receive queue was taken twice"))?;
                self.add_queue(sock)?;
            }
        } else {
            let addr = self.sock.local_addr()?;
            while self.queues.len() < n {
                self.add_queue(reuseport_socket(addr)?)?;
            }
            attach_program(self.sock.as_raw_fd(), &cbpf::vni_program(&map))?;
        }
        Ok((0..groups.len()).map(|i| if i < n { i + 1 } else { 0 }).collect())
    }

    /// A paused queue stays in the epoll set with no events (one `epoll_ctl(2)` each way).
    fn pause_queue(&mut self, q: usize, paused: bool) {
        if let Some(fd) = self.queue_fd(q) {
            let events = if paused { 0 } else { libc::EPOLLIN as u32 };
            let _ = epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, q, events);
        }
    }

    /// The thread rule of a node's dispatcher threads (its tenants' NATs), compiled into the
    /// group's program beside the queues last steered. A backend of one thread accepts only
    /// one thread.
    fn set_steering(&mut self, s: &Steering) -> io::Result<()> {
        let Some((group, _)) = self.threads.clone() else { return super::one_thread(s) };
        if usize::from(s.threads) != group.threads {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("steering for {} threads on a group of {}", s.threads, group.threads),
            ));
        }
        let mut g = group.state();
        if g.steering != *s {
            attach_program(self.sock.as_raw_fd(), &cbpf::thread_program(&g.map, s)?)?;
            g.steering = s.clone();
        }
        Ok(())
    }

    /// The largest segment sent with segmentation offload (lowered when the kernel refuses a
    /// group for its size: larger datagrams go one per message, fragmented by the kernel).
    fn gso_max_segment(&self) -> usize {
        self.gso_max_seg
    }

    fn joins_runs(&self) -> bool {
        self.tap.is_some()
    }

    fn tx_joined(&self) -> (u64, u64, u64) {
        self.tap.as_ref().map_or((0, 0, 0), |t| (t.writes, t.datagrams, t.errors))
    }

    /// Messages received and the datagrams they carried, cumulative ([`super::gro`]): more
    /// datagrams than messages when runs arrive coalesced.
    fn rx_runs(&self) -> (u64, u64) {
        self.gro.runs()
    }

    /// The bound address.
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    fn framing(&self) -> Framing {
        Framing::Datagram
    }

    /// Load lost before snic saw it, which fair sharing counts as intended load: a syscall, so
    /// the node asks once per epoch.
    fn rx_dropped(&self) -> u64 {
        (0..=self.queues.len()).map(|q| self.rx_dropped_queue(q)).sum()
    }

    fn rx_dropped_queue(&self, q: usize) -> u64 {
        match q {
            0 => self.rx_dropped.read(self.sock.as_raw_fd()),
            _ => self.queues.get(q - 1).map_or(0, |x| x.dropped.read(x.sock.as_raw_fd())),
        }
    }

    fn rx_queues(&self) -> usize {
        1 + self.queues.len()
    }

    /// The queue's socket buffer, sized for `packets` datagrams of `bytes`: the kernel charges a
    /// datagram its buffer's true size (measured: 832 bytes for a 64-byte datagram, 2,304 for
    /// 1,400), taken as `bytes + 900`, and gives a socket twice what it is asked for.
    fn set_rx_depth(&mut self, q: usize, packets: Option<usize>, bytes: usize) {
        let Some(fd) = self.queue_fd(q) else { return };
        let b = match packets {
            Some(p) => (p * (bytes + 900) / 2).min(i32::MAX as usize) as i32,
            None => RX_BUFFER as i32,
        };
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, b);
    }

    /// With more than `POLL_READY_FROM` (4) queues, one `epoll_wait(2)` tells which have
    /// datagrams, instead of a `recvmmsg` on each (most of which would find nothing).
    fn ready_queues(&mut self, ready: &mut [bool]) -> bool {
        let n = 1 + self.queues.len();
        if n <= POLL_READY_FROM || ready.len() < n {
            return false;
        }
        let k = self.epoll_wait(0);
        if k < 0 {
            return false;
        }
        ready.iter_mut().for_each(|r| *r = false);
        for ev in &self.events[..k as usize] {
            if let Some(r) = ready.get_mut(ev.u64 as usize) {
                *r = true;
            }
        }
        true
    }

    fn recv(&mut self, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        let mut n = 0;
        for q in 0..=self.queues.len() {
            if n == idx.len() {
                break;
            }
            n += self.recv_queue(q, slots, &mut idx[n..], &mut meta[n..]);
        }
        n
    }

    /// Coalesced runs (`UDP_GRO`) are split into their datagrams ([`super::gro`]): `idx` comes
    /// back reordered, datagrams first, in arrival order.
    fn recv_queue(&mut self, q: usize, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        let Some(fd) = self.queue_fd(q) else { return 0 };
        let most = idx.len().min(MAX_BATCH);
        let idx = &mut idx[..most];
        let (held, more) = self.gro.deliver_held(q, slots, idx, meta);
        if more || held == idx.len() {
            return held;
        }
        let (idx, meta) = (&mut idx[held..], &mut meta[held..]);
        let n = self.gro.plan(q, idx.len());
        for (i, &ix) in idx[..n].iter().enumerate() {
            // SAFETY: the dispatcher owns buffers it passes to `recv`.
            let (buf, _) = unsafe { slots.get(ix) };
            let (over, over_len) = self.gro.overflow(q, i);
            self.rx_iovs[i] = [
                libc::iovec { iov_base: buf[HEADROOM..].as_mut_ptr() as *mut libc::c_void, iov_len: gro::CAP },
                libc::iovec { iov_base: over as *mut libc::c_void, iov_len: over_len },
            ];
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = &mut self.addrs[i] as *mut _ as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            h.msg_iov = self.rx_iovs[i].as_mut_ptr();
            h.msg_iovlen = 2;
            h.msg_control = self.rx_cmsgs[i].0.as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = size_of::<RxCmsg>();
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        if n == 0 {
            return held;
        }
        // SAFETY: every header points at two live iovecs (an owned packet buffer, an overflow
        // buffer of the pool), at a live sockaddr_storage and at a live control buffer; `n` is
        // within the arrays.
        let r = unsafe { libc::recvmmsg(fd, self.hdrs.as_mut_ptr(), n as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        if r <= 0 {
            return held;
        }
        self.msgs.clear();
        for (h, a) in self.hdrs[..r as usize].iter().zip(&self.addrs) {
            let (ifindex, seg) = rx_info(&h.msg_hdr);
            self.msgs.push(gro::Msg {
                len: h.msg_len as usize,
                seg,
                cut: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                src: from_sockaddr(a),
                ifindex,
                form: gro::Form::One,
            });
        }
        held + self.gro.split(q, slots, idx, meta, &self.msgs)
    }

    fn send(&mut self, slots: &Slots, reqs: &[TxReq]) -> TxResult {
        // A group refused for its size is sent again at once, its datagrams one per message.
        loop {
            let (r, retry) = self.send_once(slots, reqs);
            if !retry {
                return r;
            }
        }
    }

    fn wait(&mut self, timeout: Duration) {
        let k = self.epoll_wait_for(timeout);
        if k > 0 && self.events[..k as usize].iter().any(|e| e.u64 == WAKE as u64) {
            if let Some(w) = &self.waker {
                w.clear();
            }
        }
    }

    fn waker(&mut self) -> Option<super::Waker> {
        if self.waker.is_none() {
            let w = super::Waker::new().ok()?;
            epoll_add(self.epoll.as_raw_fd(), w.fd(), WAKE).ok()?;
            self.waker = Some(w);
        }
        self.waker.clone()
    }
}
