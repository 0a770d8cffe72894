//! The XDP program in front of an AF_XDP socket: it takes the node's VXLAN datagrams and
//! passes everything else to the kernel.
//!
//! A frame goes to the socket of its receive queue (an `XSKMAP`) only if it is Ethernet +
//! IPv4 without options, not a fragment, UDP to the node's port (and, when the node has one,
//! to its address), with the 42 bytes of those headers present. ARP, ICMP, the API's TCP, IPv6
//! and outer fragments (which carry no port after the first) go on to the kernel: a UDP socket
//! beside the AF_XDP socket takes the datagrams the kernel reassembles.
//!
//! The program is a few dozen instructions, built here rather than compiled from C, so the
//! build needs no BPF toolchain; [`Filter::instructions`] is what the kernel's verifier checks.

use libxdp_sys as sys;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `XDP_PASS`.
pub const XDP_PASS: i32 = 2;
/// `XDP_DROP`.
pub const XDP_DROP: i32 = 1;

/// What the program matches, and what it does with a matching frame whose queue has no socket.
#[derive(Debug, Clone, Copy)]
pub struct Filter {
    /// The node's VXLAN UDP port.
    pub port: u16,
    /// The node's address; `None`: any.
    pub addr: Option<Ipv4Addr>,
    /// Action for a matching frame on a queue without a socket (`XDP_PASS` in service; the
    /// test sets `XDP_DROP` to tell matches from the rest without sockets).
    pub no_socket: i32,
}

/// One BPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | dst, off, imm }
}

// Opcodes (linux/bpf.h, bpf_common.h).
const LDX_W: u8 = 0x61;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const AND64_K: u8 = 0x57;
const JGT_X: u8 = 0x2d;
const JNE_K: u8 = 0x55;
const JNE32_K: u8 = 0x56;
const LD_DW: u8 = 0x18;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const PSEUDO_MAP_FD: u8 = 1;
const HELPER_REDIRECT_MAP: i32 = 51;

/// A value as a load of it from packet memory reads it on this (little-endian) machine.
fn wire16(v: u16) -> i32 {
    u16::from_ne_bytes(v.to_be_bytes()) as i32
}

impl Filter {
    /// The program's instructions, with `map_fd` the `XSKMAP`.
    pub fn instructions(&self, map_fd: i32) -> Vec<Insn> {
        // Jumps to PASS are written with a placeholder offset and patched at the end.
        const TO_PASS: i16 = i16::MIN;
        let mut p = vec![
            insn(MOV64_X, 6, 1, 0, 0), // r6 = ctx
            insn(LDX_W, 2, 1, 0, 0),   // r2 = ctx->data
            insn(LDX_W, 3, 1, 4, 0),   // r3 = ctx->data_end
            insn(MOV64_X, 4, 2, 0, 0),
            insn(ADD64_K, 4, 0, 0, 42),
            insn(JGT_X, 4, 3, TO_PASS, 0), // shorter than Ethernet + IPv4 + UDP
            insn(LDX_H, 5, 2, 12, 0),
            insn(JNE_K, 5, 0, TO_PASS, wire16(0x0800)), // not IPv4
            insn(LDX_B, 5, 2, 14, 0),
            insn(JNE_K, 5, 0, TO_PASS, 0x45), // options
            insn(LDX_B, 5, 2, 23, 0),
            insn(JNE_K, 5, 0, TO_PASS, 17), // not UDP
            insn(LDX_H, 5, 2, 20, 0),
            insn(AND64_K, 5, 0, 0, wire16(0x3fff)),
            insn(JNE_K, 5, 0, TO_PASS, 0), // a fragment
            insn(LDX_H, 5, 2, 36, 0),
            insn(JNE_K, 5, 0, TO_PASS, wire16(self.port)), // another port
        ];
        if let Some(a) = self.addr {
            p.push(insn(LDX_W, 5, 2, 30, 0));
            p.push(insn(JNE32_K, 5, 0, TO_PASS, u32::from_ne_bytes(a.octets()) as i32));
            // another address
        }
        p.extend([
            insn(LDX_W, 2, 6, 16, 0), // r2 = ctx->rx_queue_index
            insn(LD_DW, 1, PSEUDO_MAP_FD, 0, map_fd),
            insn(0, 0, 0, 0, 0),
            insn(MOV64_K, 3, 0, 0, self.no_socket), // flags: the action when the slot is empty
            insn(CALL, 0, 0, 0, HELPER_REDIRECT_MAP),
            insn(EXIT, 0, 0, 0, 0),
        ]);
        let pass = p.len();
        p.extend([insn(MOV64_K, 0, 0, 0, XDP_PASS), insn(EXIT, 0, 0, 0, 0)]);
        for (i, x) in p.iter_mut().enumerate() {
            if x.off == TO_PASS && x.code != LD_DW {
                x.off = (pass - i - 1) as i16;
            }
        }
        p
    }
}

fn last_error(what: &str, r: i32) -> io::Error {
    let e = if r < 0 { io::Error::from_raw_os_error(-r) } else { io::Error::last_os_error() };
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The program and its socket map, loaded in the kernel (closed on drop).
#[derive(Debug)]
pub struct Loaded {
    /// The `XSKMAP`: slot `q` holds the socket of receive queue `q`.
    pub map: OwnedFd,
    /// The program.
    pub prog: OwnedFd,
}

impl Loaded {
    /// Creates a socket map of `queues` slots and loads `filter` against it.
    pub fn load(filter: &Filter, queues: u32) -> io::Result<Loaded> {
        // SAFETY: plain FFI with valid arguments; a non-negative result is a descriptor we own.
        let map = unsafe {
            sys::bpf_map_create(sys::bpf_map_type_BPF_MAP_TYPE_XSKMAP, c"snic_xsks".as_ptr(), 4, 4, queues.max(1), std::ptr::null())
        };
        if map < 0 {
            return Err(last_error("creating the XSKMAP", map));
        }
        // SAFETY: as above.
        let map = unsafe { OwnedFd::from_raw_fd(map) };
        let insns = filter.instructions(map.as_raw_fd());
        let mut log = vec![0u8; 64 * 1024];
        // SAFETY: a zeroed options struct with its size set is the documented way to fill it.
        let mut opts: sys::bpf_prog_load_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<sys::bpf_prog_load_opts>();
        opts.log_buf = log.as_mut_ptr() as *mut _;
        opts.log_size = log.len() as u32;
        opts.log_level = 1;
        // SAFETY: `insns` is a valid instruction array of that length (`Insn` has the layout of
        // `struct bpf_insn`), `opts` and the log outlive the call.
        let prog = unsafe {
            sys::bpf_prog_load(
                sys::bpf_prog_type_BPF_PROG_TYPE_XDP,
                NAME.as_ptr(),
                c"Dual MIT/GPL".as_ptr(),
                insns.as_ptr() as *const sys::bpf_insn,
                insns.len(),
                &mut opts,
            )
        };
        if prog < 0 {
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            let e = last_error("loading the XDP program", prog);
            return Err(io::Error::new(e.kind(), format!("{e}; verifier: {}", String::from_utf8_lossy(&log[..end]).trim())));
        }
        // SAFETY: as above.
        Ok(Loaded { map, prog: unsafe { OwnedFd::from_raw_fd(prog) } })
    }

    /// Runs the program once on `frame` in the kernel (`BPF_PROG_TEST_RUN`) and returns its
    /// action: how the tests check the filter without an interface.
    pub fn test_run(&self, frame: &[u8]) -> io::Result<u32> {
        // SAFETY: zeroed options with their size set; the input outlives the call.
        let mut o: sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
        o.sz = std::mem::size_of::<sys::bpf_test_run_opts>();
        o.data_in = frame.as_ptr() as *const _;
        o.data_size_in = frame.len() as u32;
        o.repeat = 1;
        // SAFETY: a loaded program's descriptor and valid options.
        let r = unsafe { sys::bpf_prog_test_run_opts(self.prog.as_raw_fd(), &mut o) };
        if r < 0 {
            return Err(last_error("running the XDP program", r));
        }
        Ok(o.retval)
    }

    /// Puts socket `fd` in slot `queue` of the map.
    pub fn set_socket(&self, queue: u32, fd: i32) -> io::Result<()> {
        // SAFETY: key and value are u32s that outlive the call.
        let r =
            unsafe { sys::bpf_map_update_elem(self.map.as_raw_fd(), &queue as *const u32 as *const _, &fd as *const i32 as *const _, 0) };
        if r < 0 {
            return Err(last_error("adding the AF_XDP socket to the XSKMAP", r));
        }
        Ok(())
    }
}

/// The program's name in the kernel (at most 15 bytes).
pub const NAME: &std::ffi::CStr = c"snic_vxlan";

/// True if the XDP program attached to interface `ifindex` in mode `mode_flags` is one of
/// snic's (by its name): one a node left behind when it could not detach it.
pub fn attached_is_ours(ifindex: u32, mode_flags: u32) -> bool {
    let mut id = 0u32;
    // SAFETY: plain FFI with a valid out-pointer.
    if unsafe { sys::bpf_xdp_query_id(ifindex as i32, mode_flags as i32, &mut id) } < 0 || id == 0 {
        return false;
    }
    // SAFETY: as above; a non-negative result is a descriptor we own.
    let fd = unsafe { sys::bpf_prog_get_fd_by_id(id) };
    if fd < 0 {
        return false;
    }
    // SAFETY: as above.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed info struct and its length, filled by the kernel.
    let mut info: sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<sys::bpf_prog_info>() as u32;
    // SAFETY: a program descriptor and a buffer of `len` bytes.
    if unsafe { sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) } < 0 {
        return false;
    }
    // SAFETY: the kernel NUL-terminates the name within its 16 bytes.
    let name = unsafe { std::ffi::CStr::from_ptr(info.name.as_ptr()) };
    name == NAME
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_on_the_pass_exit() {
        for addr in [None, Some(Ipv4Addr::new(192, 0, 2, 1))] {
            let p = Filter { port: 4789, addr, no_socket: XDP_PASS }.instructions(3);
            let pass = p.len() - 2;
            assert_eq!(p[pass], insn(MOV64_K, 0, 0, 0, XDP_PASS));
            for (i, x) in p.iter().enumerate() {
                if [JGT_X, JNE_K, JNE32_K].contains(&x.code) {
                    assert_eq!(i as i64 + 1 + x.off as i64, pass as i64, "jump at {i}");
                }
            }
        }
    }

    #[test]
    fn constants_are_as_a_packet_load_reads_them() {
        assert_eq!(wire16(0x0800), 0x0008);
        assert_eq!(wire16(4789), 0xb512);
    }
}
