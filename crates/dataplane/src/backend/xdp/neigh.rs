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
    /// Receive queues (`/sys/class/net/<name>/queues/rx-*`).
    pub rx_queues: u32,
}

impl Iface {
    /// Looks up interface `name`.
    pub fn get(name: &str) -> io::Result<Iface> {
        let c = std::ffi::CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
        // SAFETY: a valid C string.
        let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if index == 0 {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface {name:?} in this network namespace")));
        }
        let mac = std::fs::read_to_string(format!("/sys/class/net/{name}/address"))?;
        let mac = parse_mac(mac.trim())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{name} has no Ethernet address ({mac:?})")))?;
        let rx_queues = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
            .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count() as u32)
            .unwrap_or(1)
            .max(1);
        Ok(Iface { name: name.to_string(), index, mac, ipv4: ipv4_of(name)?, rx_queues })
    }
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

/// Next hops' MACs, read from the kernel's neighbour table (`/proc/net/arp`) on a miss, at most
/// once per [`Neighbours::REREAD`]. A next hop the kernel has not resolved is not guessed: the
/// backend hands that packet to the kernel's own stack, whose ARP then resolves it.
#[derive(Debug)]
pub struct Neighbours {
    ifname: String,
    known: HashMap<Ipv4Addr, MacAddr>,
    read: Option<Instant>,
    /// Times the table was read.
    pub reads: u64,
}

impl Neighbours {
    /// How often a miss may read the table again.
    pub const REREAD: Duration = Duration::from_millis(100);

    /// The neighbours on interface `ifname`.
    pub fn new(ifname: &str) -> Self {
        Neighbours { ifname: ifname.to_string(), known: HashMap::new(), read: None, reads: 0 }
    }

    /// The MAC of `ip`, if the kernel has resolved it on this interface.
    pub fn get(&mut self, ip: Ipv4Addr) -> Option<MacAddr> {
        if let Some(m) = self.known.get(&ip) {
            return Some(*m);
        }
        if self.read.is_some_and(|t| t.elapsed() < Self::REREAD) {
            return None;
        }
        self.read = Some(Instant::now());
        self.reads += 1;
        if let Ok(s) = std::fs::read_to_string("/proc/net/arp") {
            self.known = parse_arp(&s, &self.ifname);
        }
        self.known.get(&ip).copied()
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
    fn loopback_has_an_index_and_an_address() {
        let lo = Iface::get("lo").unwrap();
        assert!(lo.index > 0);
        assert_eq!(lo.ipv4, Some(Ipv4Addr::LOCALHOST));
        assert!(Iface::get("no-such-if0").unwrap_err().to_string().contains("no interface"));
    }
}
