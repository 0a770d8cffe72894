//! Sending a run whole: a tap device with UDP tunnel GSO (Linux 6.17+, `TUN_F_UDP_TUNNEL_GSO`).
//!
//! A TCP burst that reached the node as a run of VXLAN datagrams (received with `UDP_GRO`, run
//! through its chain packet by packet) leaves as the UDP backend's one `UDP_SEGMENT` send — and
//! the kernel then carries it datagram by datagram: segmented at the socket, each segment through
//! the IP output path and the veth, each decapsulated by the receiving endpoint's VXLAN device
//! and taken by its TCP one by one. The kernel's own router keeps the burst whole instead. With
//! `egress_tap` the backend does the same: the run's datagrams are joined back into one
//! super-packet ([`snic_wire::tso::Joined`]: only what segmentation gives back exactly, each
//! segment's checksum valid) and written into a tap device behind a virtio-net header that says
//! "UDP tunnel GSO over IPv4, inner TCP/IPv4, this MSS, inner checksum partial". The kernel
//! routes it as one packet (the tap's packets come from the node's own address: the tap
//! accepts local sources and does no reverse-path check), the veth carries it whole, and the
//! receiving endpoint's VXLAN device and TCP take one packet of up to 64 KB; nothing segments
//! it unless a device on the way must. What does not join (other protocols, single
//! datagrams, IPv6, the other direction's ACKs) goes out of the UDP socket as before.
//!
//! Writing to the tap is one `writev` per run, gathering the payloads from the packet buffers
//! (the kernel copies once, as for a socket). Needs `CAP_NET_ADMIN` (to create the tap), a
//! kernel with UDP tunnel GSO on tun/tap, IPv4 forwarding on and `rp_filter` off in the node's
//! network namespace (docs/dataplane.md, "Sending runs whole").

use snic_wire::tso::Joined;
use snic_wire::{checksum, put16};
use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
const IFF_TAP: i16 = 0x0002;
const IFF_NO_PI: i16 = 0x1000;
const IFF_VNET_HDR: i16 = 0x4000;
/// Offloads the tap takes (linux/if_tun.h): checksum, TSO, and GSO over UDP tunnels (6.17+).
const TUN_F_CSUM: libc::c_ulong = 0x01;
const TUN_F_TSO4: libc::c_ulong = 0x02;
const TUN_F_UDP_TUNNEL_GSO: libc::c_ulong = 0x080;
/// `virtio_net_hdr_v1_hash_tunnel`: the v1 header (12 bytes), the hash (8), the outer
/// transport header's and the inner network header's offsets (2 + 2).
const VNET_LEN: usize = 24;
const VNET_F_NEEDS_CSUM: u8 = 1;
const VNET_GSO_TCPV4: u8 = 1;
const VNET_GSO_UDP_TUNNEL_IPV4: u8 = 0x20;
/// Ethernet, outer IPv4 and UDP in front of the VXLAN datagram.
const OUTER_LEN: usize = 14 + 20 + 8;
/// Room for a joined packet's own headers (VXLAN, inner Ethernet with a VLAN tag, IPv4 and TCP
/// with options).
const MAX_HDRS: usize = 8 + 18 + 60 + 60;
/// Most iovecs in one write: the headers and one payload per datagram of a run.
const MAX_IOV: usize = 1 + crate::store::MAX_BATCH;
/// Destinations whose source address is kept.
const MAX_SOURCES: usize = 1024;

/// A tap device the backend writes joined runs into (see the module docs).
pub struct TunnelTap {
    fd: OwnedFd,
    name: String,
    /// The node's data address: the outer source port, and the source address unless it is
    /// 0.0.0.0.
    src: SocketAddrV4,
    /// With `src` 0.0.0.0: each destination's source address, as the kernel picks it for a
    /// datagram the socket sends there (bounded: cleared when full).
    sources: HashMap<Ipv4Addr, Ipv4Addr>,
    /// The virtio-net header, outer headers and joined headers of the write being built.
    head: [u8; VNET_LEN + OUTER_LEN + MAX_HDRS],
    /// Outer IPv4 identification, advanced by each write's segments.
    ip_id: u16,
    iovs: Vec<libc::iovec>,
    /// Runs written whole.
    pub writes: u64,
    /// The datagrams they carried.
    pub datagrams: u64,
    /// Writes the kernel refused (their datagrams then went out of the UDP socket; the first
    /// is logged).
    pub errors: u64,
}

// SAFETY: `iovs` holds pointers only while a write is built, within one call.
unsafe impl Send for TunnelTap {}

/// Writes `v` to `/proc/sys/net/ipv4/conf/<dev>/<key>` (the tap's own settings).
fn set_conf(dev: &str, key: &str, v: &str) -> io::Result<()> {
    let p = format!("/proc/sys/net/ipv4/conf/{dev}/{key}");
    std::fs::write(&p, v).map_err(|e| io::Error::new(e.kind(), format!("{p}: {e}")))
}

/// A setting of the node's network namespace the tap needs, read: an error naming it if it is
/// not `want`.
fn require(path: &str, want: &str, why: &str) -> io::Result<()> {
    let v = std::fs::read_to_string(path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    if v.trim() != want {
        let key = path.trim_start_matches("/proc/sys/").replace('/', ".");
        return Err(io::Error::other(format!("egress_tap needs {key}={want} in the node's network namespace ({why}); it is {}", v.trim())));
    }
    Ok(())
}

/// An `ifreq` naming `name` (at most 15 bytes: checked by the caller).
fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: an all-zero ifreq is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = b as libc::c_char;
    }
    ifr
}

impl TunnelTap {
    /// Creates (or attaches to) tap device `name`, with UDP tunnel GSO, brings it up, and makes
    /// it accept the node's own address as a source; `src` is the node's IPv4 data address
    /// (0.0.0.0: each destination's source is the one the kernel's route to it gives). Fails,
    /// saying why, without the privilege, on a kernel without UDP tunnel GSO on tun/tap, or
    /// when IPv4 forwarding is off or `rp_filter` on for all interfaces.
    pub fn open(name: &str, src: SocketAddrV4) -> io::Result<Self> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("egress_tap: an interface name of 1 to 15 bytes, not {name:?}"),
            ));
        }
        require("/proc/sys/net/ipv4/ip_forward", "1", "the kernel forwards what the tap hands it")?;
        require("/proc/sys/net/ipv4/conf/all/rp_filter", "0", "the tap's packets come from the node's own address")?;
        let path = CString::new("/dev/net/tun").expect("no NUL");
        // SAFETY: a plain open(2) of a path we own.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("egress_tap: /dev/net/tun: {e}")));
        }
        // SAFETY: `fd` was just opened and is ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let fail = |what: &str| {
            let e = io::Error::last_os_error();
            io::Error::new(e.kind(), format!("egress_tap {name}: {what}: {e}"))
        };
        let mut ifr = ifreq(name);
        ifr.ifr_ifru.ifru_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
        // SAFETY: TUNSETIFF reads and writes the ifreq we own.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut ifr) } < 0 {
            return Err(fail("TUNSETIFF (creating the tap needs CAP_NET_ADMIN)"));
        }
        let hdr = VNET_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one int.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETVNETHDRSZ, &hdr) } < 0 {
            return Err(fail("TUNSETVNETHDRSZ"));
        }
        // SAFETY: TUNSETOFFLOAD takes its flags by value.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_UDP_TUNNEL_GSO) } < 0 {
            return Err(fail("TUNSETOFFLOAD with UDP tunnel GSO (Linux 6.17 or later)"));
        }
        up(name)?;
        set_conf(name, "accept_local", "1")?;
        set_conf(name, "rp_filter", "0")?;
        // (Nothing routes to the tap, but IPv6 would send router solicitations into it.)
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
        let mac = mac_of(name)?;
        let mut head = [0u8; VNET_LEN + OUTER_LEN + MAX_HDRS];
        let eth = &mut head[VNET_LEN..VNET_LEN + 14];
        eth[..6].copy_from_slice(&mac);
        eth[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
        eth[12..14].copy_from_slice(&[0x08, 0x00]);
        let (writes, datagrams, errors) = (0, 0, 0);
        Ok(TunnelTap {
            fd,
            name: name.to_string(),
            src,
            sources: HashMap::new(),
            head,
            ip_id: 0,
            iovs: Vec::with_capacity(MAX_IOV),
            writes,
            datagrams,
            errors,
        })
    }

    /// The tap's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the first of the `n` datagrams `get(0)`, `get(1)`, … to `dst` join, and the outer
    /// source address to send them from (`None`: they do not, or the kernel has no route to
    /// `dst`). Only an inner frame without a VLAN tag
    /// joins (the offsets the tunnel segmentation takes are an untagged frame's).
    pub fn join<'a>(&mut self, dst: SocketAddrV4, n: usize, get: impl Fn(usize) -> &'a [u8]) -> Option<(Joined, Ipv4Addr)> {
        let j = Joined::of(n.min(MAX_IOV - 1), get)?;
        if j.l3 != 8 + 14 {
            return None;
        }
        Some((j, self.source_for(*dst.ip())?))
    }

    /// Writes the datagrams `j` joined (`get(0)`, …, all to `dst`, from `src`: as
    /// [`TunnelTap::join`] found them) as one packet. A write the kernel refuses is counted (the first logged) and
    /// its datagrams are the caller's to send; the tap stays on (a tenant whose packets the
    /// kernel would refuse joined cannot turn joining off for the others).
    pub fn write<'a>(&mut self, j: &Joined, src: Ipv4Addr, dst: SocketAddrV4, get: impl Fn(usize) -> &'a [u8]) -> io::Result<()> {
        let (first, last) = (get(0), get(j.count - 1));
        let vx_len = j.hdrs + j.payload;
        let o = VNET_LEN;
        // The virtio-net header: offsets from the outer Ethernet header.
        let v = &mut self.head[..VNET_LEN];
        v.fill(0);
        v[0] = VNET_F_NEEDS_CSUM;
        v[1] = VNET_GSO_TCPV4 | VNET_GSO_UDP_TUNNEL_IPV4;
        v[2..4].copy_from_slice(&((OUTER_LEN + j.hdrs) as u16).to_le_bytes());
        v[4..6].copy_from_slice(&(j.mss as u16).to_le_bytes());
        v[6..8].copy_from_slice(&((OUTER_LEN + j.l4) as u16).to_le_bytes());
        v[8..10].copy_from_slice(&16u16.to_le_bytes());
        v[20..22].copy_from_slice(&(14u16 + 20).to_le_bytes());
        v[22..24].copy_from_slice(&((OUTER_LEN + j.l3) as u16).to_le_bytes());
        // Outer IPv4 (no DF: as the socket's datagrams, a segment over a smaller MTU is
        // fragmented on the way) and UDP (checksum 0).
        let ip = &mut self.head[o + 14..o + 34];
        ip.fill(0);
        ip[0] = 0x45;
        ip[8] = 64;
        ip[9] = 17;
        put16(ip, 2, (28 + vx_len) as u16);
        put16(ip, 4, self.ip_id);
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.ip().octets());
        let c = checksum::checksum(ip);
        put16(ip, 10, c);
        let udp = &mut self.head[o + 34..o + 42];
        put16(udp, 0, self.src.port());
        put16(udp, 2, dst.port());
        put16(udp, 4, (8 + vx_len) as u16);
        put16(udp, 6, 0);
        j.write_headers(first, last, &mut self.head[o + OUTER_LEN..o + OUTER_LEN + j.hdrs]);
        self.iovs.clear();
        self.iovs.push(libc::iovec { iov_base: self.head.as_mut_ptr() as *mut libc::c_void, iov_len: VNET_LEN + OUTER_LEN + j.hdrs });
        for i in 0..j.count {
            let d = get(i);
            self.iovs.push(libc::iovec { iov_base: d[j.hdrs..].as_ptr() as *mut libc::c_void, iov_len: d.len() - j.hdrs });
        }
        // SAFETY: every iovec points into a live buffer for the call's duration: `head`, and the
        // datagrams `get` lent (the kernel only reads them).
        let r = unsafe { libc::writev(self.fd.as_raw_fd(), self.iovs.as_ptr(), self.iovs.len() as i32) };
        self.iovs.clear();
        if r < 0 {
            let e = io::Error::last_os_error();
            if self.errors == 0 {
                tracing::warn!(tap = %self.name, error = %e, "egress_tap: the kernel refused a joined run (sent out of the socket instead; counted in transmit.joined.refused)");
            }
            self.errors += 1;
            return Err(e);
        }
        self.ip_id = self.ip_id.wrapping_add(j.payload.div_ceil(j.mss) as u16);
        self.writes += 1;
        self.datagrams += j.count as u64;
        Ok(())
    }

    /// The outer source address for `dst`: the data address, or the kernel's choice for a
    /// datagram to `dst` (`None`: it has no route there; the socket then says so).
    fn source_for(&mut self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        if !self.src.ip().is_unspecified() {
            return Some(*self.src.ip());
        }
        if let Some(&s) = self.sources.get(&dst) {
            return Some(s);
        }
        let probe = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
        probe.connect((dst, 4789)).ok()?;
        let SocketAddr::V4(a) = probe.local_addr().ok()? else { return None };
        if self.sources.len() >= MAX_SOURCES {
            self.sources.clear();
        }
        self.sources.insert(dst, *a.ip());
        Some(*a.ip())
    }
}

/// Brings interface `name` up (and without ARP: nothing is sent to it).
fn up(name: &str) -> io::Result<()> {
    // SAFETY: a plain socket(2) for the interface ioctls.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `s` is ours.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    let mut ifr = ifreq(name);
    // SAFETY: SIOCGIFFLAGS / SIOCSIFFLAGS read and write the ifreq we own.
    unsafe {
        if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            return Err(io::Error::last_os_error());
        }
        ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_NOARP) as i16;
        if libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &ifr) < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("egress_tap {name}: bringing it up: {e}")));
        }
    }
    Ok(())
}

/// Interface `name`'s MAC address.
fn mac_of(name: &str) -> io::Result<[u8; 6]> {
    let p = format!("/sys/class/net/{name}/address");
    let s = std::fs::read_to_string(&p)?;
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        return Err(io::Error::other(format!("{p}: not a MAC address: {s:?}")));
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).map_err(|e| io::Error::other(format!("{name}'s MAC {s:?}: {e}")))?;
    }
    Ok(mac)
}
