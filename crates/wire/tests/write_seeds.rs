//! Regenerates the seed corpus when run with `SNIC_WRITE_SEEDS=1` (ignored otherwise):
//! `SNIC_WRITE_SEEDS=1 cargo test -p snic-wire --test write_seeds -- --ignored`.

use snic_wire::build::{build, FrameSpec, L4Spec, OuterSpec};
use snic_wire::ethernet::MacAddr;
use std::net::IpAddr;

#[test]
#[ignore = "a generator, not a check: SNIC_WRITE_SEEDS=1 cargo test -p snic-wire --test write_seeds -- --ignored"]
fn write_seed_corpus() {
    assert!(std::env::var("SNIC_WRITE_SEEDS").is_ok(), "set SNIC_WRITE_SEEDS=1 to regenerate fuzz/corpus/parse");
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/parse");
    std::fs::create_dir_all(&dir).unwrap();
    let v4 = |a: [u8; 4]| IpAddr::from(a);
    let v6 = |n: u16| IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, n]);
    let outer4 = OuterSpec {
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
        src_ip: v4([192, 0, 2, 1]),
        dst_ip: v4([192, 0, 2, 2]),
        src_port: 50000,
    };
    let outer6 = OuterSpec { src_ip: v6(1), dst_ip: v6(2), ..outer4 };
    let l4s = [
        L4Spec::Udp { src_port: 1234, dst_port: 53 },
        L4Spec::Tcp { src_port: 40000, dst_port: 80, flags: 0x02 },
        L4Spec::Icmp { msg_type: 8, ident: 7, seq: 1 },
    ];
    let mut n = 0;
    for outer in [None, Some(outer4), Some(outer6)] {
        for (inner_v6, l4) in [(false, l4s[0]), (false, l4s[1]), (false, l4s[2]), (true, l4s[0]), (true, l4s[1])] {
            let (src, dst) = if inner_v6 { (v6(10), v6(11)) } else { (v4([10, 0, 0, 1]), v4([10, 0, 0, 2])) };
            let spec = FrameSpec {
                outer,
                vni: 100,
                inner_src_mac: MacAddr([2, 0, 0, 0, 9, 1]),
                inner_dst_mac: MacAddr([2, 0, 0, 0, 9, 2]),
                src,
                dst,
                l4,
                payload_len: 18,
                payload_byte: 0x5a,
            };
            let mut b = vec![0u8; 2048];
            let len = build(&spec, &mut b).unwrap();
            std::fs::write(dir.join(format!("seed-{n:02}")), &b[..len]).unwrap();
            n += 1;
        }
    }
}
