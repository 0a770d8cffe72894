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
            TxReq { idx: b, start: HEADROOM as u16, len: len as u16, tenant: TenantId(0), bytes: len as u16, dst: to }
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
