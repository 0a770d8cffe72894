//! Tenant modules for experiments: `wasm` NTs whose cost per packet is set (a loop of so many
//! rounds) or unbounded (a loop that never ends: the hostile tenant the time bound is for).

use snic_nt::wasm::WasmConfig;
use snic_nt::NtSpec;

/// A module whose every packet runs a loop of `rounds` rounds (nine units of fuel each), then
/// forwards it; `rounds == u32::MAX` loops until its fuel runs out.
pub fn burner(rounds: u32) -> Vec<u8> {
    let cond =
        if rounds == u32::MAX { "(br $l)".to_string() } else { format!("(br_if $l (i32.lt_u (local.get $i) (i32.const {rounds})))") };
    wat::parse_str(format!(
        r#"(module
             (memory (export "memory") 1)
             (data (i32.const 1028) "\00\08\00\00")
             (func (export "snic_packet") (result i32) i32.const 1024)
             (func (export "snic_process") (param $len i32) (result i32) (local $i i32)
               (loop $l (local.set $i (i32.add (local.get $i) (i32.const 1))) {cond})
               i32.const 0))"#
    ))
    .expect("a valid module")
}

/// Units of fuel one round of [`burner`]'s loop takes (wasmi 2, measured by the test below).
pub const FUEL_PER_ROUND: u64 = 9;

/// A `wasm` NT of about `fuel` units a packet, with a time bound of `bound` units.
pub fn costing(fuel: u64, bound: u64) -> NtSpec {
    let mut c = WasmConfig::of(&burner((fuel / FUEL_PER_ROUND) as u32), "");
    c.max_fuel_per_packet = bound;
    NtSpec::Wasm(c)
}

/// A `wasm` NT that never finishes a packet, bounded at `bound` units and `packet_us` of wall
/// time a packet.
pub fn hog(bound: u64, packet_us: u64) -> NtSpec {
    let mut c = WasmConfig::of(&burner(u32::MAX), "");
    c.max_fuel_per_packet = bound;
    c.max_packet_us = packet_us;
    c.max_overruns_per_s = u32::MAX;
    NtSpec::Wasm(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_nt::wasm::Wasm;
    use snic_nt::{Ctx, Nt, Pkt, PktMeta, Verdict};

    #[test]
    fn a_burner_costs_the_fuel_it_is_made_for() {
        let NtSpec::Wasm(c) = costing(20_000, 1_000_000) else { unreachable!() };
        let mut nt = Wasm::new(&c).unwrap();
        let mut buf = vec![0u8; 2048];
        let mut meta = PktMeta { off: 128, len: 8 + 64, vni: 1, tenant: snic_core::ids::TenantId(1), inner: None };
        let v = nt.process(&Ctx::real(snic_core::time::Instant::ZERO), &mut Pkt { buf: &mut buf, meta: &mut meta, at: Default::default() });
        assert_eq!(v, Verdict::Continue);
        let used = nt.packet_fuel() - nt.fuel_left();
        assert!((19_000..21_000).contains(&used), "{used} units for 20,000");
    }
}
