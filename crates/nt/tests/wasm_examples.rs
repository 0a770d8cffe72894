//! The C examples in examples/wasm/, compiled with clang as a tenant would, run as `wasm` NTs:
//! the firewall decides every packet as the built-in firewall does on the same rules, and the
//! rate limiter keeps each flow to its rate.

use snic_core::ids::TenantId;
use snic_core::time::Instant;
use snic_nt::firewall::{Firewall, FirewallConfig};
use snic_nt::wasm::{compile_c, EngineKind, Wasm, WasmConfig};
use snic_nt::{Ctx, Nt, Pkt, PktMeta, Verdict, HEADROOM};
use snic_wire::build::{build, FrameSpec, L4Spec};
use snic_wire::ethernet::MacAddr;
use snic_wire::layout::parse_inner;
use std::path::Path;

fn example(name: &str) -> Vec<u8> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/wasm").join(name);
    compile_c(&src).unwrap_or_else(|e| panic!("{e}"))
}

struct Frame {
    buf: Vec<u8>,
    meta: PktMeta,
}

impl Frame {
    fn ip(src: &str, dst: &str, l4: L4Spec) -> Frame {
        let spec = FrameSpec {
            outer: None,
            vni: 100,
            inner_src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            inner_dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            l4,
            payload_len: 10,
            payload_byte: 0x5a,
        };
        let mut buf = vec![0u8; 2048];
        let n = build(&spec, &mut buf[HEADROOM..]).unwrap();
        Self::of(buf, n)
    }

    /// An ARP request, after the 8-byte VXLAN header.
    fn arp() -> Frame {
        let mut buf = vec![0u8; 2048];
        let f = &mut buf[HEADROOM + 8..];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        Self::of(buf, 8 + 14 + 28)
    }

    fn of(buf: Vec<u8>, n: usize) -> Frame {
        let inner = parse_inner(&buf[HEADROOM + 8..HEADROOM + n]).ok();
        Frame { buf, meta: PktMeta { off: HEADROOM as u16, len: n as u16, vni: 100, tenant: TenantId(1), inner } }
    }

    fn run(&mut self, nt: &mut dyn Nt, now_ns: u64) -> Verdict {
        nt.process(&Ctx::real(Instant::from_nanos(now_ns)), &mut Pkt { buf: &mut self.buf, meta: &mut self.meta, at: Default::default() })
    }
}

/// (action, proto, src, dst, src ports, dst ports), `*` for any: both firewalls' rules.
const RULES: [(&str, &str, &str, &str, &str, &str); 6] = [
    ("deny", "6", "*", "*", "*", "22"),
    ("allow", "6", "10.1.0.0/16", "*", "*", "1000-2000"),
    ("deny", "*", "10.1.2.0/24", "*", "*", "*"),
    ("allow", "17", "*", "192.168.0.0/16", "53", "*"),
    ("deny", "17", "*", "*", "*", "*"),
    ("allow", "1", "*", "10.9.0.0/16", "*", "*"),
];

fn builtin(default: &str, non_ip: &str) -> Firewall {
    let any = |s: &str| s == "*";
    let ports = |s: &str| {
        if any(s) {
            serde_json::json!({"lo": 0, "hi": 65535})
        } else {
            let (lo, hi) = s.split_once('-').unwrap_or((s, s));
            serde_json::json!({"lo": lo.parse::<u16>().unwrap(), "hi": hi.parse::<u16>().unwrap()})
        }
    };
    let rules: Vec<_> = RULES
        .iter()
        .map(|(a, p, s, d, sp, dp)| {
            let mut r = serde_json::json!({"action": a, "src_ports": ports(sp), "dst_ports": ports(dp)});
            if !any(p) {
                r["proto"] = p.parse::<u8>().unwrap().into();
            }
            if !any(s) {
                r["src"] = (*s).into();
            }
            if !any(d) {
                r["dst"] = (*d).into();
            }
            r
        })
        .collect();
    let cfg: FirewallConfig = serde_json::from_value(serde_json::json!({"rules": rules, "default": default, "non_ip": non_ip})).unwrap();
    Firewall::new(cfg)
}

fn c_config(default: &str, non_ip: &str) -> String {
    let mut t = format!("# the same rules as the built-in firewall's\ndefault {default}\nnon_ip {non_ip}\n");
    for (a, p, s, d, sp, dp) in RULES {
        t += &format!("{a} {p} {s} {d} {sp} {dp}\n");
    }
    t
}

#[test]
fn the_c_firewall_decides_every_packet_as_the_builtin_one() {
    let module = example("firewall.c");
    let l4s = |sp: u16, dp: u16| {
        [
            L4Spec::Tcp { src_port: sp, dst_port: dp, flags: 0x02 },
            L4Spec::Udp { src_port: sp, dst_port: dp },
            L4Spec::Icmp { msg_type: 8, ident: sp, seq: dp },
        ]
    };
    let v4 = ["10.1.0.5", "10.1.2.7", "10.2.0.1", "192.168.3.4", "10.9.1.1", "172.16.0.1"];
    let v6 = ["fd00::1", "fd00::2"];
    let ports = [22u16, 53, 999, 1000, 1500, 2000, 2001, 8080];
    let engines = [EngineKind::Wasmi, EngineKind::Wasmtime].into_iter().filter(|e| e.built());
    for (engine, (default, non_ip)) in engines.flat_map(|e| [(e, ("allow", "allow")), (e, ("deny", "deny"))]) {
        let mut fw = builtin(default, non_ip);
        let mut cfg = WasmConfig::of(&module, &c_config(default, non_ip));
        cfg.engine = engine;
        let mut c = Wasm::new(&cfg).expect("the C firewall starts");
        let (mut n, mut dropped) = (0, 0);
        let mut check = |f: &mut Frame, what: String| {
            let want = f.run(&mut fw, 1);
            let got = f.run(&mut c, 1);
            assert_eq!(
                matches!(got, Verdict::Continue),
                matches!(want, Verdict::Continue),
                "{what}: built-in {want:?}, C on {engine:?} {got:?}"
            );
            n += 1;
            dropped += matches!(want, Verdict::Drop(_)) as usize;
        };
        for (addrs, pairs) in [(&v4[..], 6), (&v6[..], 2)] {
            for s in &addrs[..pairs] {
                for d in &addrs[..pairs] {
                    for sp in ports {
                        for dp in ports {
                            for l4 in l4s(sp, dp) {
                                check(&mut Frame::ip(s, d, l4), format!("{s}:{sp} -> {d}:{dp} {l4:?}"));
                            }
                        }
                    }
                }
            }
        }
        check(&mut Frame::arp(), "ARP".into());
        let counted = c.wasm_counters().guest(0) + c.wasm_counters().guest(1);
        assert_eq!(counted, n as u64, "the module counts every packet");
        assert_eq!(c.wasm_counters().guest(1), dropped as u64);
        assert!(dropped > n / 20 && dropped < n * 19 / 20, "{dropped} of {n} dropped: the rules must cut both ways");
    }
    let bad = Wasm::new(&WasmConfig::of(&module, "allow 6 10.0.0.0/33 * * *\n")).unwrap_err();
    assert!(bad.to_string().contains("snic_init returned 101"), "{bad}");
}

#[test]
fn the_c_rate_limiter_keeps_each_flow_to_its_rate() {
    let module = example("ratelimit.c");
    let mut rl = Wasm::new(&WasmConfig::of(&module, "rate 10 burst 5")).expect("the C rate limiter starts");
    let flow = |sp: u16| Frame::ip("10.0.0.1", "10.0.0.2", L4Spec::Udp { src_port: sp, dst_port: 80 });
    let passed = |rl: &mut Wasm, sp: u16, at_ns: u64, n: usize| (0..n).filter(|_| flow(sp).run(rl, at_ns) == Verdict::Continue).count();
    assert_eq!(passed(&mut rl, 1, 1_000, 20), 5, "a burst of 5, then nothing");
    assert_eq!(passed(&mut rl, 2, 1_000, 3), 3, "another flow has its own bucket");
    assert_eq!(passed(&mut rl, 1, 1_000 + 500_000_000, 20), 5, "half a second at 10/s: five more");
    assert_eq!(passed(&mut rl, 1, 1_000 + 600_000_000, 20), 1, "0.1 s: one more");
    let arp = Frame::arp().run(&mut rl, 1);
    assert_eq!(arp, Verdict::Continue, "non-IP frames pass");
    assert_eq!(rl.wasm_counters().guest(0), 5 + 3 + 5 + 1);
    assert_eq!(rl.wasm_counters().guest(1), 15 + 15 + 19);
}
