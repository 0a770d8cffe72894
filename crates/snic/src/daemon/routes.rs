//! Which interface the node reaches an address through — the kernel's own answer, as `ip route
//! get` asks it (an `RTM_GETROUTE` request over rtnetlink) — for the reverse-path check of
//! tenants' VTEPs (docs/endpoints.md, "Trust"): a frame from a tenant's VTEP address that comes
//! in on another interface than this one carries a forged source, whatever the host's
//! `rp_filter` says. The decision is the MAT's (`snic_core::mat::Mat::source_check`); this
//! module only asks the kernel.
//!
//! Answers are looked up when a plan is deployed and every [`REFRESH`] after (interfaces and
//! routes come and go), off the data plane's thread.

use snic_core::mat::IpPrefix;
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// How often the routes to tenants' VTEPs are looked up again.
pub const REFRESH: Duration = Duration::from_secs(2);

/// The interface index for each prefix the kernel has a route to (a prefix shorter than its
/// address: the route to its first address). Prefixes without a route are left out (the node
/// then accepts them on any interface).
pub type Interfaces = HashMap<IpPrefix, u32>;

// linux/netlink.h and linux/rtnetlink.h.
const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTMSG_LEN: usize = 12;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;

/// An rtnetlink socket, for route lookups.
pub struct Rtnl {
    fd: OwnedFd,
    seq: u32,
}

impl Rtnl {
    /// Opens a route socket (no privilege needed to ask for a route).
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval { tv_sec: 1, tv_usec: 0 };
        // SAFETY: passes a live timeval and its size.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        Ok(Rtnl { fd, seq: 0 })
    }

    /// The index of the interface the kernel routes `addr` out of; `None` when it has no route.
    pub fn oif(&mut self, addr: IpAddr) -> io::Result<Option<u32>> {
        self.seq = self.seq.wrapping_add(1);
        let (family, bytes): (u8, Vec<u8>) = match addr {
            IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
            IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
        };
        let len = NLMSG_HDRLEN + RTMSG_LEN + 4 + bytes.len();
        let mut req = Vec::with_capacity(len);
        req.extend_from_slice(&(len as u32).to_ne_bytes());
        req.extend_from_slice(&RTM_GETROUTE.to_ne_bytes());
        req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        req.extend_from_slice(&self.seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        // rtmsg: family, dst_len (the full address), then zeros.
        req.extend_from_slice(&[family, (bytes.len() * 8) as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        req.extend_from_slice(&((4 + bytes.len()) as u16).to_ne_bytes());
        req.extend_from_slice(&RTA_DST.to_ne_bytes());
        req.extend_from_slice(&bytes);
        // SAFETY: all-zero is a valid sockaddr_nl; the kernel is port 0.
        let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        to.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: `req` and `to` are live for the call, with their lengths.
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                req.as_ptr() as *const libc::c_void,
                req.len(),
                0,
                &to as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: `buf` is live and writable for its length.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            match parse_reply(&buf[..n as usize], self.seq) {
                Reply::Oif(i) => return Ok(i),
                Reply::Other => continue,
            }
        }
    }
}

enum Reply {
    /// The answer to our request: the interface, if any.
    Oif(Option<u32>),
    /// Something else (an older request's answer).
    Other,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Reads a netlink datagram: our route's output interface, an error for our request (no
/// route: `Oif(None)`), or something else.
fn parse_reply(b: &[u8], seq: u32) -> Reply {
    let mut at = 0;
    while let (Some(len), Some(ty), Some(s)) = (u32_at(b, at), u16_at(b, at + 4), u32_at(b, at + 8)) {
        let len = len as usize;
        if len < NLMSG_HDRLEN || at + len > b.len() {
            break;
        }
        let msg = &b[at..at + len];
        if s == seq {
            match ty {
                NLMSG_ERROR => return Reply::Oif(None),
                RTM_NEWROUTE => {
                    let mut a = NLMSG_HDRLEN + RTMSG_LEN;
                    while let (Some(alen), Some(aty)) = (u16_at(msg, a), u16_at(msg, a + 2)) {
                        let alen = alen as usize;
                        if alen < 4 || a + alen > msg.len() {
                            break;
                        }
                        if aty == RTA_OIF {
                            return Reply::Oif(u32_at(msg, a + 4));
                        }
                        a += alen.div_ceil(4) * 4;
                    }
                    return Reply::Oif(None);
                }
                _ => {}
            }
        }
        at += len.div_ceil(4) * 4;
    }
    Reply::Other
}

/// The interfaces `prefixes` are reached through, as the kernel routes now (a prefix the
/// kernel has no route to, or a lookup that fails, is left out).
pub fn resolve(prefixes: &[IpPrefix]) -> Interfaces {
    let mut out = Interfaces::new();
    if prefixes.is_empty() {
        return out;
    }
    let mut nl = match Rtnl::open() {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "no route socket: tenants' VTEPs are accepted on any interface");
            return out;
        }
    };
    for p in prefixes {
        match nl.oif(p.addr) {
            Ok(Some(i)) => {
                out.insert(*p, i);
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(prefix = %p, error = %e, "route lookup failed"),
        }
    }
    out
}

/// Every allowed source prefix of a plan.
pub fn prefixes(plan: &snic_control::plan::Plan) -> Vec<IpPrefix> {
    let mut v: Vec<IpPrefix> = plan.sources.iter().flat_map(|(_, ps)| ps.iter().copied()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifindex(name: &str) -> u32 {
        let c = std::ffi::CString::new(name).unwrap();
        // SAFETY: a live NUL-terminated name.
        unsafe { libc::if_nametoindex(c.as_ptr()) }
    }

    #[test]
    fn the_kernel_says_where_an_address_is_reached() {
        let mut nl = Rtnl::open().unwrap();
        let lo = ifindex("lo");
        assert_eq!(nl.oif("127.0.0.1".parse().unwrap()).unwrap(), Some(lo), "loopback is reached through lo");
        assert_eq!(nl.oif("127.0.0.9".parse().unwrap()).unwrap(), Some(lo));
        // The same socket answers again, each request by its own sequence number.
        let p: IpPrefix = "127.0.0.0/8".parse().unwrap();
        assert_eq!(resolve(&[p]).get(&p), Some(&lo));
    }

    #[test]
    fn a_reply_is_read_by_its_sequence_number_and_attributes() {
        // An RTM_NEWROUTE for seq 7 with RTA_TABLE (4 bytes of data) then RTA_OIF = 3.
        let mut m = Vec::new();
        let len = (NLMSG_HDRLEN + RTMSG_LEN + 8 + 8) as u32;
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[0; RTMSG_LEN]);
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&15u16.to_ne_bytes());
        m.extend_from_slice(&254u32.to_ne_bytes());
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&RTA_OIF.to_ne_bytes());
        m.extend_from_slice(&3u32.to_ne_bytes());
        assert!(matches!(parse_reply(&m, 7), Reply::Oif(Some(3))));
        assert!(matches!(parse_reply(&m, 8), Reply::Other), "another request's answer");
        assert!(matches!(parse_reply(&m[..20], 7), Reply::Other), "cut short: nothing read past the end");
        m[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert!(matches!(parse_reply(&m, 7), Reply::Oif(None)), "no route");
    }
}
