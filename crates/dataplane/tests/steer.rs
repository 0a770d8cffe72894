//! The reuseport group of a node's dispatcher threads: the kernel, running the compiled
//! program, gives every datagram to the thread and queue that `snic_core::steer`'s rule names.

use snic_core::mat::PortRange;
use snic_core::steer::{NatClaim, NatKind, Steering};
use snic_dataplane::backend::udp::UdpBackend;
use snic_dataplane::backend::{Backend, RxMeta};
use std::collections::HashMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

/// A small deterministic generator (xorshift), so that a failure names its datagram.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[(self.next() % v.len() as u64) as usize]
    }
}

const PUBLIC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const INSIDE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);

/// A random VXLAN payload: the headers the rule reads, chosen so that every branch is taken
/// (NAT returns, DNAT replies, fragments, ICMP echo and errors, IPv6, ARP, cut short).
fn payload(r: &mut Rng) -> Vec<u8> {
    let vni = r.pick(&[100u32, 101, 200, 300]);
    let mut p = vec![0x08, 0, 0, 0];
    p.extend_from_slice(&(vni << 8).to_be_bytes());
    p.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2]);
    let kind = r.next() % 10;
    match kind {
        0 => {
            p.extend_from_slice(&[0x08, 0x06]);
            p.extend_from_slice(&[0; 28]);
        }
        1 => {
            p.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 20, r.pick(&[6u8, 17, 58]), 64]);
            for _ in 0..32 {
                p.push(r.pick(&[0u8, 1, 0xfe, 0x80]));
            }
            p.extend_from_slice(&(r.next() as u32).to_be_bytes());
            p.extend_from_slice(&[0; 16]);
        }
        _ => {
            let proto = r.pick(&[6u8, 17, 1, 47]);
            let ihl = r.pick(&[5u8, 5, 6]);
            let frag: u16 = r.pick(&[0, 0, 0, 0x2000, 0x0010]);
            let pick_addr = |r: &mut Rng| {
                let any = Ipv4Addr::new(10, 0, 0, (r.next() % 7) as u8);
                r.pick(&[PUBLIC, INSIDE, Ipv4Addr::new(8, 8, 8, 8), any])
            };
            let (src, dst) = (pick_addr(r), pick_addr(r));
            p.extend_from_slice(&[0x08, 0x00, 0x40 | ihl, 0, 0, 60, 0, 1]);
            p.extend_from_slice(&frag.to_be_bytes());
            p.extend_from_slice(&[64, proto, 0, 0]);
            p.extend_from_slice(&src.octets());
            p.extend_from_slice(&dst.octets());
            p.extend(std::iter::repeat_n(0, usize::from(ihl - 5) * 4));
            let port = |r: &mut Rng| {
                let any = 40000 + (r.next() % 2000) as u16;
                r.pick(&[80u16, 8080, 53, 1024, 33279, 33280, 65535, any])
            };
            match proto {
                1 => {
                    let id = port(r);
                    p.extend_from_slice(&[r.pick(&[0u8, 8, 3]), 0, 0, 0, (id >> 8) as u8, id as u8, 0, 1]);
                }
                _ => {
                    p.extend_from_slice(&port(r).to_be_bytes());
                    p.extend_from_slice(&port(r).to_be_bytes());
                }
            }
            p.extend_from_slice(&[0; 12]);
        }
    }
    if r.next().is_multiple_of(12) {
        let cut = (r.next() as usize) % p.len();
        p.truncate(cut.max(1));
    }
    p
}

#[test]
fn the_kernel_gives_each_datagram_to_the_thread_and_queue_the_rule_names() {
    const THREADS: usize = 3;
    let mut group = UdpBackend::bind_threads("127.0.0.1:0".parse().unwrap(), THREADS, true).unwrap();
    let to = group[0].local_addr().unwrap();
    // Two tenants: VNIs 100 and 101 with a source NAT, 200 with a destination NAT.
    let groups = vec![vec![100, 101], vec![200]];
    let ports = PortRange { lo: 1024, hi: 65535 };
    let steering = Steering {
        threads: THREADS as u16,
        claims: vec![
            NatClaim { vnis: vec![100, 101], kind: NatKind::Snat { public: PUBLIC, ports } },
            NatClaim { vnis: vec![200], kind: NatKind::Dnat { proto: 6, public: PUBLIC, port: 80, to: INSIDE, to_port: 8080 } },
        ],
    };
    for b in &mut group {
        assert_eq!(b.steer(&groups).unwrap(), vec![1, 2]);
        b.set_steering(&steering).unwrap();
        assert_eq!(b.rx_queues(), 3);
    }
    // Each datagram's expected (thread, queue).
    let queue_of = |p: &[u8]| -> usize {
        let vni = u32::from_be_bytes(p[4..8].try_into().unwrap()) >> 8;
        groups.iter().position(|g| g.contains(&vni)).map_or(0, |i| i + 1)
    };
    let expect = |p: &[u8]| match steering.decide(p) {
        Some(k) => (usize::from(k), queue_of(p)),
        None => (0, 0),
    };
    let mut r = Rng(0x5eed_cafe_f00d);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let store = snic_dataplane::store::Store::new(256, 32);
    let slots = store.slots().clone();
    let mut idx: Vec<u32> = (0..32).collect();
    let mut meta = vec![RxMeta::default(); 32];
    let (mut sent, mut got) = (HashMap::<Vec<u8>, (usize, usize)>::new(), 0usize);
    let mut by_thread = [0usize; THREADS];
    const N: usize = 3000;
    for i in 0..N {
        let p = payload(&mut r);
        sent.insert(p.clone(), expect(&p));
        tx.send_to(&p, to).unwrap();
        // Read as it goes (loopback delivers at once; a full socket would drop).
        if i % 64 == 63 || i == N - 1 {
            let t0 = Instant::now();
            while got <= i && t0.elapsed() < Duration::from_secs(5) {
                for (k, b) in group.iter_mut().enumerate() {
                    for q in 0..3 {
                        let n = b.recv_queue(q, &slots, &mut idx, &mut meta);
                        for j in 0..n {
                            // SAFETY: the test owns every buffer; nothing else touches the store.
                            let (buf, _) = unsafe { slots.get(idx[j]) };
                            let p = &buf[snic_nt::HEADROOM..snic_nt::HEADROOM + meta[j].len as usize];
                            let want = sent.get(p).copied();
                            assert_eq!(
                                want,
                                Some((k, q)),
                                "datagram {p:02x?}: the rule says (thread, queue) {want:?}, the kernel gave it to ({k}, {q})"
                            );
                            by_thread[k] += 1;
                        }
                        got += n;
                    }
                }
            }
        }
    }
    assert_eq!(got, N, "every datagram arrived once");
    // Every thread got a fair part (the rule spreads flows).
    assert!(by_thread.iter().all(|&n| n > N / 6), "{by_thread:?}");
    // A group of one thread's steering is refused for another count.
    assert!(group[0].set_steering(&Steering { threads: 2, claims: vec![] }).is_err());
    let mut plain = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    assert!(plain.set_steering(&Steering { threads: 2, claims: vec![] }).is_err());
    assert!(plain.set_steering(&Steering { threads: 1, claims: vec![] }).is_ok());
}
