//! The interface an AF_XDP backend runs on (index, MAC, IPv4 address) and the next hops' MACs
//! from the kernel's neighbour table.

use snic_wire::ethernet::MacAddr;
use std::collections::HashMap;
use std::io;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// What the backend needs to know of its interface.
#[derive(Debug, Clone)]
pub struct Iface {
    /// Its name.
    pub name: String,
    /// Its index.
    pub index: u32,
    /// Its MAC: the source of every frame the node sends.
    pub mac: MacAddr,
    /// Its first IPv4 address, if it has one.
    pub ipv4: Option<Ipv4Addr>,
}

impl Iface {
    /// Looks up interface `name` in the calling thread's network namespace (through sockets,
    /// not /sys, which shows the namespace it was mounted in).
    pub fn get(name: &str) -> io::Result<Iface> {
        let c = std::ffi::CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
        // SAFETY: a valid C string.
        let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if index == 0 {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface {name:?} in this network namespace")));
        }
        Ok(Iface { name: name.to_string(), index, mac: mac_of(name)?, ipv4: ipv4_of(name)? })
    }
}

/// The hardware address of interface `name` (SIOCGIFHWADDR); an error if it is not Ethernet.
fn mac_of(name: &str) -> io::Result<MacAddr> {
    // SAFETY: a plain socket for the ioctl, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a zeroed ifreq is valid; its name is set below (shorter than IFNAMSIZ).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
        *d = s as libc::c_char;
    }
    // SAFETY: our socket and a valid ifreq, which the ioctl fills.
    let r = unsafe { libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut req) };
    let e = io::Error::last_os_error();
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    if r < 0 {
        return Err(e);
    }
    // SAFETY: SIOCGIFHWADDR fills the hardware-address member of the union.
    let a = unsafe { req.ifr_ifru.ifru_hwaddr };
    if a.sa_family != libc::ARPHRD_ETHER {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{name} is not an Ethernet interface")));
    }
    let mut m = [0u8; 6];
    for (d, s) in m.iter_mut().zip(a.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(MacAddr(m))
}

fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(MacAddr(m))
}

/// The first IPv4 address of interface `name` (getifaddrs).
fn ipv4_of(name: &str) -> io::Result<Option<Ipv4Addr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut p = list;
    while !p.is_null() {
        // SAFETY: `p` walks the list getifaddrs returned; entries and their names are valid
        // until freeifaddrs.
        let e = unsafe { &*p };
        // SAFETY: as above.
        let n = unsafe { std::ffi::CStr::from_ptr(e.ifa_name) };
        // SAFETY: an AF_INET address is a sockaddr_in.
        if n.to_bytes() == name.as_bytes() && !e.ifa_addr.is_null() && unsafe { (*e.ifa_addr).sa_family } as i32 == libc::AF_INET {
            // SAFETY: as above.
            let sin = unsafe { &*(e.ifa_addr as *const libc::sockaddr_in) };
            found = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            break;
        }
        p = e.ifa_next;
    }
    // SAFETY: the list getifaddrs returned.
    unsafe { libc::freeifaddrs(list) };
    Ok(found)
}

/// Next hops' MACs, read from the kernel's neighbour table (`/proc/thread-self/net/arp`: the
/// namespace of the thread that reads, which is the one the socket is in) on a miss, at most
/// once per [`Neighbours::REREAD`]. A next hop the kernel has not resolved is not guessed: the
/// backend hands that packet to the kernel's own stack, whose ARP then resolves it.
#[derive(Debug)]
pub struct Neighbours {
    ifname: String,
    known: HashMap<Ipv4Addr, MacAddr>,
    read: Option<Instant>,
    /// How long a miss waits before it reads the table again: doubles from
    /// [`Neighbours::REREAD_MIN`] to [`Neighbours::REREAD_MAX`] while misses stay misses (a
    /// VTEP that never answers ARP costs a read every 100 ms, not one a packet).
    backoff: Duration,
    /// Times the table was read.
    pub reads: u64,
}

impl Neighbours {
    /// A miss re-reads the table after this at first (the kernel's ARP takes about a round trip).
    pub const REREAD_MIN: Duration = Duration::from_millis(1);
    /// ... and after this at most.
    pub const REREAD_MAX: Duration = Duration::from_millis(100);
    /// A MAC read is used this long, then read again (a neighbour whose MAC changed).
    pub const FRESH: Duration = Duration::from_secs(5);

    /// The neighbours on interface `ifname`.
    pub fn new(ifname: &str) -> Self {
        Neighbours { ifname: ifname.to_string(), known: HashMap::new(), read: None, backoff: Self::REREAD_MIN, reads: 0 }
    }

    /// The MAC of `ip`, if the kernel has resolved it on this interface.
    pub fn get(&mut self, ip: Ipv4Addr) -> Option<MacAddr> {
        let age = self.read.map_or(Duration::MAX, |t| t.elapsed());
        let cached = self.known.get(&ip).copied();
        if (cached.is_some() && age < Self::FRESH) || (cached.is_none() && age < self.backoff) {
            return cached;
        }
        self.read = Some(Instant::now());
        self.reads += 1;
        if let Ok(s) = std::fs::read_to_string("/proc/thread-self/net/arp") {
            self.known = parse_arp(&s, &self.ifname);
        }
        let m = self.known.get(&ip).copied();
        self.backoff = if m.is_some() { Self::REREAD_MIN } else { (self.backoff * 2).min(Self::REREAD_MAX) };
        m
    }
}

/// Complete entries of `/proc/net/arp` on `ifname`.
fn parse_arp(s: &str, ifname: &str) -> HashMap<Ipv4Addr, MacAddr> {
    s.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(2)?.trim_start_matches("0x"), 16).ok()?;
            // ATF_COM: resolved.
            (f.get(5) == Some(&ifname) && flags & 0x2 != 0).then_some(())?;
            Some((f[0].parse().ok()?, parse_mac(f[3])?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arp_table_gives_complete_entries_of_the_interface_only() {
        let t = "IP address       HW type     Flags       HW address            Mask     Device\n\
                 192.168.1.2      0x1         0x2         aa:bb:cc:dd:ee:01     *        eth1\n\
                 192.168.1.3      0x1         0x0         00:00:00:00:00:00     *        eth1\n\
                 10.0.0.2         0x1         0x2         aa:bb:cc:dd:ee:02     *        eth0\n";
        let m = parse_arp(t, "eth1");
        assert_eq!(m.len(), 1);
        assert_eq!(m[&Ipv4Addr::new(192, 168, 1, 2)], MacAddr([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 1]));
        assert_eq!(parse_mac("aa:bb:cc:dd:ee"), None);
        assert_eq!(parse_mac("aa:bb:cc:dd:ee:ff:00"), None);
    }

    #[test]
    fn loopback_is_refused_and_has_an_address() {
        assert!(Iface::get("lo").unwrap_err().to_string().contains("not an Ethernet interface"));
        assert!(Iface::get("no-such-if0").unwrap_err().to_string().contains("no interface"));
        assert_eq!(ipv4_of("lo").unwrap(), Some(Ipv4Addr::LOCALHOST));
    }
}
