//! Coalesced receive (`UDP_GRO`) on loopback: a sender's segmentation-offload send arrives at a
//! GRO socket as one message, which the backend splits back into its datagrams.

use snic_core::ids::TenantId;
use snic_dataplane::backend::gro::CAP;
use snic_dataplane::backend::udp::UdpBackend;
use snic_dataplane::backend::{Backend, RxMeta, TxReq};
use snic_dataplane::store::{Slots, Store};
use snic_nt::HEADROOM;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Datagram `i` of a test: `len` bytes, its number in the first four, then a VXLAN VNI of
/// `i >> 16` (where a steered backend looks), then a pattern of it.
fn payload(i: u32, len: usize) -> Vec<u8> {
    let mut d: Vec<u8> = (0..len).map(|k| (k as u32).wrapping_mul(31).wrapping_add(i) as u8).collect();
    d[..4].copy_from_slice(&i.to_be_bytes());
    d[4..8].copy_from_slice(&((i >> 16) << 8).to_be_bytes());
    d
}

/// Sends `lens.len()` datagrams (datagram `i` of `lens[i]` bytes) from `tx` to `to`, in one batch
/// so that runs of one size go out as one segmentation-offload message.
fn send(tx: &mut UdpBackend, store: &mut Store, first: u32, lens: &[usize], to: SocketAddr) {
    let mut idx = Vec::new();
    store.take_for_rx(lens.len(), &mut idx);
    let slots = store.slots().clone();
    let reqs: Vec<TxReq> = idx
        .iter()
        .zip(lens)
        .enumerate()
        .map(|(i, (&b, &len))| {
            // SAFETY: the test owns the buffers it just took.
            let (buf, _) = unsafe { slots.get(b) };
            buf[HEADROOM..HEADROOM + len].copy_from_slice(&payload(first + i as u32, len));
            TxReq { idx: b, start: HEADROOM as u16, len: len as u16, tenant: TenantId(0), bytes: len as u16, dst: to, partial: false }
        })
        .collect();
    let mut off = 0;
    while off < reqs.len() {
        let r = tx.send(&slots, &reqs[off..]);
        assert_eq!(r.failed, 0, "loopback refused a datagram");
        off += r.sent;
    }
    for b in idx {
        store.release(b);
    }
}

/// What a receive with `per_call` buffers at a time delivers until `want` datagrams came (5 s at
/// most, then what came): each datagram's number, length and whether it was cut, checking the
/// bytes of each uncut one.
fn receive(rx: &mut UdpBackend, slots: &Slots, per_call: usize, want: usize) -> Vec<(u32, usize, bool)> {
    receive_from(rx, None, slots, per_call, want)
}

/// As [`receive`], from queue `q` only (`None`: all).
fn receive_from(rx: &mut UdpBackend, q: Option<usize>, slots: &Slots, per_call: usize, want: usize) -> Vec<(u32, usize, bool)> {
    let mut got = Vec::new();
    let t0 = Instant::now();
    let mut idx: Vec<u32> = (0..per_call as u32).collect();
    let mut meta = vec![RxMeta::default(); per_call];
    while got.len() < want && t0.elapsed() < Duration::from_secs(5) {
        let n = match q {
            Some(q) => rx.recv_queue(q, slots, &mut idx, &mut meta),
            None => rx.recv(slots, &mut idx, &mut meta),
        };
        let mut seen: Vec<u32> = idx.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..per_call as u32).collect::<Vec<_>>(), "the buffers come back reordered, none lost or doubled");
        for i in 0..n {
            // SAFETY: the test owns every buffer; nothing else touches the store.
            let (buf, _) = unsafe { slots.get(idx[i]) };
            let d = &buf[HEADROOM..HEADROOM + meta[i].len as usize];
            let num = u32::from_be_bytes(d[..4].try_into().unwrap());
            if !meta[i].truncated {
                let at = d.iter().zip(payload(num, d.len())).position(|(a, b)| *a != b);
                assert_eq!(at, None, "datagram {num} ({} bytes) differs from byte", d.len());
            }
            got.push((num, meta[i].len as usize, meta[i].truncated));
        }
    }
    got
}

fn pair() -> (UdpBackend, UdpBackend, Store, Store, SocketAddr) {
    let rx = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let to = rx.local_addr().unwrap();
    let tx = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    (rx, tx, Store::new(256, 64), Store::new(64, 8), to)
}

#[test]
fn a_run_arrives_as_one_message_and_leaves_as_its_datagrams_in_order() {
    let (mut rx, mut tx, mut txs, rxs, to) = pair();
    // Two runs (the second ends shorter), and a datagram of another size.
    let mut lens = vec![1400; 20];
    lens.extend([900; 7]);
    lens.push(600);
    lens.extend([1000; 30]);
    send(&mut tx, &mut txs, 0, &lens, to);
    let got = receive(&mut rx, rxs.slots(), 32, lens.len());
    let want: Vec<(u32, usize, bool)> = lens.iter().enumerate().map(|(i, &l)| (i as u32, l, false)).collect();
    assert_eq!(got, want);
    let (msgs, dgrams) = rx.rx_runs();
    assert_eq!(dgrams, lens.len() as u64);
    assert!(msgs < dgrams / 4, "runs arrived coalesced: {msgs} messages for {dgrams} datagrams");
}

#[test]
fn a_run_longer_than_the_buffers_offered_waits_and_comes_first_next_time() {
    let (mut rx, mut tx, mut txs, rxs, to) = pair();
    // Three runs of 40, each more than a call's 8 buffers.
    for r in 0..3 {
        send(&mut tx, &mut txs, r * 40, &[1200; 40], to);
    }
    let got = receive(&mut rx, rxs.slots(), 8, 120);
    assert_eq!(got, (0..120).map(|i| (i, 1200, false)).collect::<Vec<_>>());
    // One buffer a call: the same, one at a time.
    send(&mut tx, &mut txs, 1000, &[700; 50], to);
    let got = receive(&mut rx, rxs.slots(), 1, 50);
    assert_eq!(got, (1000..1050).map(|i| (i, 700, false)).collect::<Vec<_>>());
    let (msgs, dgrams) = rx.rx_runs();
    assert!(msgs * 4 < dgrams, "runs arrived coalesced: {msgs} messages for {dgrams} datagrams");
}

#[test]
fn datagrams_larger_than_a_buffer_are_cut_coalesced_or_not() {
    let (mut rx, mut tx, mut txs, rxs, to) = pair();
    // A run of datagrams each larger than a packet buffer: every one is reported cut.
    send(&mut tx, &mut txs, 0, &[CAP + 40; 5], to);
    let got = receive(&mut rx, rxs.slots(), 32, 5);
    assert_eq!(got, (0..5).map(|i| (i, CAP, true)).collect::<Vec<_>>());
    // One large datagram alone (reaches the overflow buffer, not coalesced), then a normal one.
    let big = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    big.send_to(&payload(7, 9000), to).unwrap();
    big.send_to(&payload(8, 100), to).unwrap();
    let got = receive(&mut rx, rxs.slots(), 32, 2);
    assert_eq!(got, vec![(7, CAP, true), (8, 100, false)]);
}

#[test]
fn runs_held_for_one_tenants_queue_take_nothing_from_another_queue() {
    let mut rx = UdpBackend::bind_steered("127.0.0.1:0".parse().unwrap()).unwrap();
    let to = rx.local_addr().unwrap();
    assert_eq!(rx.steer(&[vec![100], vec![200]]).unwrap(), vec![1, 2]);
    let (mut tx, mut txs, rxs) = (UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap(), Store::new(64, 8), Store::new(256, 64));
    // Tenant 100 sends 40 runs of 40, and its queue is read once, with 32 buffers: it asks for
    // 32 messages (it has seen no runs yet): it delivers the first datagram and holds the rest
    // of its run and 31 runs whole, in its own pool.
    let a = 100 << 16;
    for r in 0..40 {
        send(&mut tx, &mut txs, a + r * 40, &[1000; 40], to);
    }
    assert_eq!(receive_from(&mut rx, Some(1), rxs.slots(), 32, 1), vec![(a, 1000, false)]);
    // Tenant 200's queue receives all of its runs meanwhile, in order.
    let b = 200 << 16;
    for r in 0..8 {
        send(&mut tx, &mut txs, b + r * 30, &[1300; 30], to);
    }
    let got = receive_from(&mut rx, Some(2), rxs.slots(), 32, 240);
    assert_eq!(got, (b..b + 240).map(|i| (i, 1300, false)).collect::<Vec<_>>());
    // And all of tenant 100's datagrams come, in order, from where its read stopped.
    let got = receive_from(&mut rx, Some(1), rxs.slots(), 32, 1599);
    assert_eq!(got, (a + 1..a + 1600).map(|i| (i, 1000, false)).collect::<Vec<_>>());
}

/// Sends `bytes` from `sock` to `to` as one message the kernel marks for segmentation at `seg`
/// (`UDP_SEGMENT`): on loopback it reaches a GRO socket whole, with `seg` in its control
/// message — as an offloading endpoint's unsegmented tunnel packet reaches a node.
fn send_marked(sock: &std::net::UdpSocket, bytes: &[u8], seg: u16, to: SocketAddr) {
    use std::os::fd::AsRawFd;
    let SocketAddr::V4(to) = to else { panic!("IPv4 only") };
    // SAFETY: all-zero is a valid sockaddr_in.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as u16;
    sa.sin_port = to.port().to_be();
    sa.sin_addr = libc::in_addr { s_addr: u32::from_ne_bytes(to.ip().octets()) };
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    #[repr(C, align(8))]
    struct C([u8; 32]);
    let mut c = C([0; 32]);
    // SAFETY: the header points at live locals for the call; the control buffer holds one
    // CMSG_SPACE(2) message.
    let r = unsafe {
        let mut h: libc::msghdr = std::mem::zeroed();
        h.msg_name = &mut sa as *mut _ as *mut libc::c_void;
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = c.0.as_mut_ptr() as *mut libc::c_void;
        h.msg_controllen = libc::CMSG_SPACE(2) as usize;
        let cm = libc::CMSG_FIRSTHDR(&h);
        (*cm).cmsg_level = 17; // SOL_UDP
        (*cm).cmsg_type = 103; // UDP_SEGMENT
        (*cm).cmsg_len = libc::CMSG_LEN(2) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cm) as *mut u16, seg);
        libc::sendmsg(sock.as_raw_fd(), &h, 0)
    };
    assert_eq!(r, bytes.len() as isize, "send: {}", std::io::Error::last_os_error());
}

/// A VXLAN datagram holding one inner TCP packet of `payload` bytes (numbered), its TCP
/// checksum wrong (an offloading sender leaves it partial).
fn superpacket(payload: usize) -> Vec<u8> {
    use snic_wire::build::{build, frame_len, FrameSpec, L4Spec};
    let s = FrameSpec {
        outer: None,
        vni: 100,
        inner_src_mac: snic_wire::ethernet::MacAddr([2, 0, 0, 0, 0, 1]),
        inner_dst_mac: snic_wire::ethernet::MacAddr([2, 0, 0, 0, 0, 2]),
        src: "10.1.0.1".parse().unwrap(),
        dst: "10.1.0.2".parse().unwrap(),
        l4: L4Spec::Tcp { src_port: 40000, dst_port: 5201, flags: 0x18 },
        payload_len: payload,
        payload_byte: 0,
    };
    let mut d = vec![0; frame_len(&s)];
    build(&s, &mut d).unwrap();
    let hdrs = d.len() - payload;
    for (i, b) in d[hdrs..].iter_mut().enumerate() {
        *b = (i / 3) as u8;
    }
    d[hdrs - 4] ^= 0x55;
    d
}

#[test]
fn an_unsegmented_tcp_packet_is_cut_at_its_mss_into_valid_segments() {
    let (mut rx, _, _, rxs, to) = pair();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (payload, mss) = (40_000, 1348);
    let d = superpacket(payload);
    send_marked(&sock, &d, mss as u16, to);
    // Then an unsegmented packet too large for a buffer that is not TCP: it cannot be cut.
    let mut udp = superpacket(5000);
    udp[8 + 14 + 9] = 17;
    send_marked(&sock, &udp, 1000, to);
    let want = payload.div_ceil(mss);
    let mut idx: Vec<u32> = (0..8).collect();
    let mut meta = vec![RxMeta::default(); 8];
    let (mut segs, mut cut) = (Vec::new(), 0);
    let t0 = Instant::now();
    while segs.len() + cut < want + 1 && t0.elapsed() < Duration::from_secs(5) {
        let n = rx.recv(rxs.slots(), &mut idx, &mut meta);
        for i in 0..n {
            // SAFETY: the test owns every buffer; nothing else touches the store.
            let (buf, _) = unsafe { rxs.slots().get(idx[i]) };
            if meta[i].truncated {
                cut += 1;
            } else {
                segs.push(buf[HEADROOM..HEADROOM + meta[i].len as usize].to_vec());
            }
        }
    }
    assert_eq!((segs.len(), cut), (want, 1), "{want} segments, then the UDP packet cut");
    let hdrs = d.len() - payload;
    let mut joined = Vec::new();
    for s in &segs {
        let ip = &s[8 + 14..];
        assert!(snic_wire::build::verify_l4_checksum(ip, 20, 6), "each segment's TCP checksum is complete");
        assert!(s.len() - hdrs <= mss);
        joined.extend_from_slice(&s[hdrs..]);
    }
    assert_eq!(joined, d[hdrs..], "the payload, in order");
    assert_eq!(rx.rx_runs(), (2, want as u64 + 1));
}

#[test]
fn an_unsegmented_tcp_packet_without_its_mss_is_cut_to_what_the_underlay_carries() {
    // As the kernel delivers an offloading endpoint's tunnel packet: one datagram, no size.
    let (mut rx, _, _, rxs, to) = pair();
    let d = superpacket(20_000);
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().send_to(&d, to).unwrap();
    let hdrs = d.len() - 20_000;
    let per = snic_dataplane::backend::gro::SUPER_IP_MAX - (hdrs - 8 - 14);
    let want = 20_000usize.div_ceil(per);
    let mut idx: Vec<u32> = (0..32).collect();
    let mut meta = vec![RxMeta::default(); 32];
    let t0 = Instant::now();
    let mut n = 0;
    while n == 0 && t0.elapsed() < Duration::from_secs(5) {
        n = rx.recv(rxs.slots(), &mut idx, &mut meta);
    }
    assert_eq!(n, want);
    let mut joined = Vec::new();
    for i in 0..n {
        // SAFETY: the test owns every buffer; nothing else touches the store.
        let (buf, _) = unsafe { rxs.slots().get(idx[i]) };
        let s = &buf[HEADROOM..HEADROOM + meta[i].len as usize];
        assert!(!meta[i].truncated && s.len() - 8 - 14 <= snic_dataplane::backend::gro::SUPER_IP_MAX);
        assert!(snic_wire::build::verify_l4_checksum(&s[8 + 14..], 20, 6));
        joined.extend_from_slice(&s[hdrs..]);
    }
    assert_eq!(joined, d[hdrs..]);
}
