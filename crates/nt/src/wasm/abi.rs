//! The guest ABI, version 1: what a tenant's WebAssembly module exports and imports, and the
//! packet area it shares with the node. docs/wasm.md is the tenant's guide;
//! `examples/wasm/snic_nt.h` is the same contract for C.
//!
//! **Exports** the module must have:
//! - `memory`: its linear memory;
//! - `snic_packet() -> i32`: the address of its packet area (a [`HEADER_LEN`]-byte header, then
//!   the frame's bytes), called once at start, after `snic_init`;
//! - `snic_process(len: i32) -> i32`: one packet, whose inner Ethernet frame (`len` bytes) the
//!   node has just written into the packet area; returns a verdict ([`FORWARD`], [`DROP`] with a
//!   code, [`SKIP`]), with [`CHANGED`] set if it rewrote the frame.
//!
//! and may have `snic_init() -> i32` (called once per instance before any packet; non-zero
//! refuses the deployment with that code).
//!
//! **Imports**, all from module `snic` and nothing else: [`IMPORTS`].

/// The ABI version this node speaks (docs/wasm.md).
pub const VERSION: u32 = 1;

/// Bytes of the packet area's header, in front of the frame.
pub const HEADER_LEN: usize = 64;

/// The smallest frame capacity a module may declare: the largest inner frame a packet buffer
/// holds (2048-byte buffers, 128 bytes of headroom, the 8-byte VXLAN header).
pub const MIN_CAP: u32 = 2048 - 128 - 8;

/// Header fields: byte offsets, little-endian.
pub mod field {
    /// u32, in and out: the frame's length; the module may change it (with [`super::CHANGED`]).
    pub const LEN: usize = 0;
    /// u32, the module's: the bytes its frame buffer holds (at least [`super::MIN_CAP`]).
    pub const CAP: usize = 4;
    /// u32: the tenant's id on this node.
    pub const TENANT: usize = 8;
    /// u32: the packet's VNI.
    pub const VNI: usize = 12;
    /// u32: the DAG route the packet takes (the node's number for it).
    pub const DAG: usize = 16;
    /// u32: the step of that route the packet is at.
    pub const STEP: usize = 20;
    /// u16: offset in the frame of the IP (or ARP) header; [`super::NONE`] if the frame was not
    /// parsed (encrypted, or not understood).
    pub const L3_OFF: usize = 24;
    /// u16: offset of the L4 header.
    pub const L4_OFF: usize = 26;
    /// u16: one past the IP packet.
    pub const L3_END: usize = 28;
    /// u8: [`super::L3_NONE`], [`super::L3_ARP`], [`super::L3_IPV4`], [`super::L3_IPV6`].
    pub const L3: usize = 30;
    /// u8: the IP protocol.
    pub const PROTO: usize = 31;
    /// u16: TCP/UDP source port, host order.
    pub const SRC_PORT: usize = 32;
    /// u16: TCP/UDP destination port, host order.
    pub const DST_PORT: usize = 34;
    /// u8: TCP flags or ICMP type.
    pub const L4_FLAGS: usize = 36;
    /// u64: the node's clock, ns.
    pub const NOW_NS: usize = 40;
}

/// An offset that is not there.
pub const NONE: u16 = 0xffff;
/// No parsed layer 3.
pub const L3_NONE: u8 = 0;
/// ARP.
pub const L3_ARP: u8 = 1;
/// IPv4.
pub const L3_IPV4: u8 = 4;
/// IPv6.
pub const L3_IPV6: u8 = 6;

/// Verdict (low byte): on to the next NT.
pub const FORWARD: i32 = 0;
/// Verdict: drop; bits 8–15 carry the module's reason code (0–255).
pub const DROP: i32 = 1;
/// Verdict: the packet skips the rest of this chain's NTs at this step and goes on.
pub const SKIP: i32 = 2;
/// Flag: the module rewrote the frame (and perhaps its length): the node copies it back.
pub const CHANGED: i32 = 1 << 16;

/// Counters a module may keep (`snic.counter_add`); they show in status and `/metrics`.
pub const COUNTERS: usize = 16;
/// Drop codes counted one by one; higher codes are counted together.
pub const CODES: usize = 16;

/// The host functions a module may import from `snic`: name, parameter and result types
/// (`i` = i32, `I` = i64).
pub const IMPORTS: [(&str, &str, &str); 4] = [
    // The node's clock, ns.
    ("now_ns", "", "I"),
    // Adds n to counter idx (0..16); another idx traps.
    ("counter_add", "iI", ""),
    // The bytes of the NT's `config`.
    ("config_len", "", "i"),
    // Copies min(len, config_len) bytes of the config to ptr; returns how many. Traps if the
    // range is outside the module's memory.
    ("config_read", "ii", "i"),
];
