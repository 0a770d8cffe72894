//! The classic BPF programs of the UDP backend's reuseport group (`SO_ATTACH_REUSEPORT_CBPF`):
//! the kernel runs one on each datagram's UDP payload (the VXLAN header on) and delivers the
//! datagram to the group's socket whose index it returns. A load past the datagram's end ends
//! the program with 0: socket 0.
//!
//! - [`vni_program`]: each tenant's VNIs to its receive queue (socket `q`), the rest to 0.
//! - [`thread_program`]: the same for a node of `n` dispatcher threads, whose group holds a
//!   socket per queue and thread (`q·n + k`): the queue from the VNI, the thread by
//!   [`snic_core::steer`]'s rule, which this compiles (a test checks the kernel's choice
//!   against [`Steering::thread_of`] on random datagrams).

use snic_core::steer::{NatClaim, NatKind, Steering, ETHERTYPE_AT, IP_AT, VNI_AT};
use std::io;

/// One instruction.
pub type Insn = libc::sock_filter;

/// A classic program holds at most this many instructions (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

/// What one tenant's NATs may take of a thread program ([`claim_insns`]): the program is one for
/// the node, so that no tenant's NT configurations fill it for the others (about 14 source or
/// 16 destination translations on one VNI).
pub const INSNS_PER_TENANT: usize = 256;

/// Where a jump goes: on to the next instruction, or to a label.
#[derive(Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    L(usize),
}

enum Op {
    Plain(Insn),
    /// A conditional jump (its code, its constant) and its two targets.
    Cond(u16, u32, To, To),
    /// `ja` to a label (a 32-bit offset: any distance).
    Ja(usize),
    Label(usize),
}

/// A program under construction, with forward labels.
#[derive(Default)]
struct Asm {
    ops: Vec<Op>,
    labels: usize,
}

const fn ins(code: u32, k: u32) -> Insn {
    Insn { code: code as u16, jt: 0, jf: 0, k }
}

use libc::{
    BPF_A, BPF_ABS, BPF_ADD, BPF_ALU, BPF_AND, BPF_B, BPF_DIV, BPF_H, BPF_IMM, BPF_IND, BPF_JA, BPF_JEQ, BPF_JGE, BPF_JGT, BPF_JMP, BPF_K,
    BPF_LD, BPF_LDX, BPF_MEM, BPF_MISC, BPF_MOD, BPF_MSH, BPF_MUL, BPF_RET, BPF_RSH, BPF_ST, BPF_SUB, BPF_TAX, BPF_W, BPF_X, BPF_XOR,
};

/// Scratch memory: the VNI, the queue's first socket, the inner protocol, ports and addresses.
const M_VNI: u32 = 0;
const M_QUEUE: u32 = 1;
const M_PROTO: u32 = 2;
const M_SPORT: u32 = 3;
const M_DPORT: u32 = 4;
const M_SRC: u32 = 5;
const M_DST: u32 = 6;
const M_TMP: u32 = 7;

impl Asm {
    fn label(&mut self) -> usize {
        self.labels += 1;
        self.labels - 1
    }
    fn put(&mut self, i: Insn) -> &mut Self {
        self.ops.push(Op::Plain(i));
        self
    }
    fn at(&mut self, l: usize) -> &mut Self {
        self.ops.push(Op::Label(l));
        self
    }
    fn ld_abs(&mut self, size: u32, off: usize) -> &mut Self {
        self.put(ins(BPF_LD | size | BPF_ABS, off as u32))
    }
    fn ld_ind(&mut self, size: u32, off: usize) -> &mut Self {
        self.put(ins(BPF_LD | size | BPF_IND, off as u32))
    }
    fn ld_imm(&mut self, k: u32) -> &mut Self {
        self.put(ins(BPF_LD | BPF_IMM, k))
    }
    fn ld_mem(&mut self, m: u32) -> &mut Self {
        self.put(ins(BPF_LD | BPF_MEM, m))
    }
    fn ldx_mem(&mut self, m: u32) -> &mut Self {
        self.put(ins(BPF_LDX | BPF_MEM, m))
    }
    fn st(&mut self, m: u32) -> &mut Self {
        self.put(ins(BPF_ST, m))
    }
    fn alu(&mut self, op: u32, k: u32) -> &mut Self {
        self.put(ins(BPF_ALU | op | BPF_K, k))
    }
    fn alu_x(&mut self, op: u32) -> &mut Self {
        self.put(ins(BPF_ALU | op | BPF_X, 0))
    }
    fn tax(&mut self) -> &mut Self {
        self.put(ins(BPF_MISC | BPF_TAX, 0))
    }
    /// Jumps to `to` if A == k (else on).
    fn jeq(&mut self, k: u32, to: usize) -> &mut Self {
        self.ops.push(Op::Cond((BPF_JMP | BPF_JEQ | BPF_K) as u16, k, To::L(to), To::Next));
        self
    }
    /// Jumps to `to` unless A `op` k (`op` JEQ, JGE or JGT).
    fn unless(&mut self, op: u32, k: u32, to: usize) -> &mut Self {
        self.ops.push(Op::Cond((BPF_JMP | op | BPF_K) as u16, k, To::Next, To::L(to)));
        self
    }
    fn ja(&mut self, to: usize) -> &mut Self {
        self.ops.push(Op::Ja(to));
        self
    }

    /// The instructions, labels resolved. A conditional jump reaches at most 255 ahead: the
    /// code is laid out so that its targets are near (a far one goes through a `ja`).
    fn finish(self) -> io::Result<Vec<Insn>> {
        let mut at = vec![usize::MAX; self.labels];
        let mut n = 0;
        for op in &self.ops {
            match op {
                Op::Label(l) => at[*l] = n,
                _ => n += 1,
            }
        }
        if n > MAX_INSNS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the steering program needs {n} instructions, over the kernel's {MAX_INSNS}: too many VNIs or NAT rules to steer"),
            ));
        }
        let mut out = Vec::with_capacity(n);
        let far = || io::Error::new(io::ErrorKind::InvalidInput, "the steering program has a jump too far (too many VNIs in one claim)");
        for op in &self.ops {
            let here = out.len();
            let off = |t: To| -> io::Result<u8> {
                match t {
                    To::Next => Ok(0),
                    To::L(l) => u8::try_from(at[l] - here - 1).map_err(|_| far()),
                }
            };
            match *op {
                Op::Label(_) => {}
                Op::Plain(i) => out.push(i),
                Op::Cond(code, k, t, f) => out.push(Insn { code, jt: off(t)?, jf: off(f)?, k }),
                Op::Ja(l) => out.push(ins(BPF_JMP | BPF_JA, (at[l] - here - 1) as u32)),
            }
        }
        Ok(out)
    }
}

/// Load bytes 4..8 (VNI and the reserved byte), shift the VNI down, compare it with each mapped
/// VNI and return that VNI's socket index in the group; 0 otherwise (and for datagrams too short
/// to load).
pub fn vni_program(map: &[(u32, u32)]) -> Vec<Insn> {
    let op = |code: u32, jt: u8, jf: u8, k: u32| Insn { code: code as u16, jt, jf, k };
    let mut p = vec![op(BPF_LD | BPF_W | BPF_ABS, 0, 0, VNI_AT as u32), op(BPF_ALU | BPF_RSH | BPF_K, 0, 0, 8)];
    for &(vni, queue) in map {
        p.push(op(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, vni));
        p.push(op(BPF_RET | BPF_K, 0, 0, queue));
    }
    p.push(op(BPF_RET | BPF_K, 0, 0, 0));
    p
}

/// The instructions one tenant's NAT translation takes in [`thread_program`]: a node of several
/// threads bounds what each tenant's NATs may take of the program's [`MAX_INSNS`].
pub fn claim_insns(c: &NatClaim) -> usize {
    let mut a = Asm::default();
    let (fold, ret) = (a.label(), a.label());
    claim(&mut a, c, 2, fold, ret);
    a.ops.iter().filter(|o| !matches!(o, Op::Label(_))).count()
}

/// The code of one claim: on a match, the thread in A and a jump to `ret` (or a hash in A and
/// a jump to `fold`); otherwise on past it.
fn claim(a: &mut Asm, c: &NatClaim, n: u32, fold: usize, ret: usize) {
    let (mine, next) = (a.label(), a.label());
    a.ld_mem(M_VNI);
    for &v in &c.vnis {
        a.jeq(v, mine);
    }
    a.ja(next).at(mine);
    match c.kind {
        NatKind::Snat { public, ports: r } => {
            let proto = a.label();
            a.ld_mem(M_DST).unless(BPF_JEQ, u32::from(public), next);
            a.ld_mem(M_PROTO).jeq(1, proto).jeq(6, proto).jeq(17, proto).ja(next).at(proto);
            a.ld_mem(M_DPORT).unless(BPF_JGE, u32::from(r.lo), next);
            let inside = a.label();
            a.ops.push(Op::Cond((BPF_JMP | BPF_JGT | BPF_K) as u16, u32::from(r.hi), To::L(next), To::L(inside)));
            a.at(inside);
            // The block of the port (`owner::slot_of`): ((port − lo + 1)·n − 1) / span.
            let span = u32::from(r.hi) - u32::from(r.lo) + 1;
            a.alu(BPF_SUB, u32::from(r.lo)).alu(BPF_ADD, 1).alu(BPF_MUL, n).alu(BPF_SUB, 1).alu(BPF_DIV, span).ja(ret);
        }
        NatKind::Dnat { proto, public, port, to, to_port } => {
            a.ld_mem(M_PROTO).unless(BPF_JEQ, u32::from(proto), next);
            a.ld_mem(M_SRC).unless(BPF_JEQ, u32::from(to), next);
            a.ld_mem(M_SPORT).unless(BPF_JEQ, u32::from(to_port), next);
            // As if from the public address and port the client sent to.
            a.ld_imm(u32::from(public))
                .ldx_mem(M_DST)
                .alu_x(BPF_XOR)
                .alu(BPF_XOR, u32::from(port))
                .ldx_mem(M_DPORT)
                .alu_x(BPF_XOR)
                .ja(fold);
        }
    }
    a.at(next);
}

/// Socket `q·n + k` of a group of `s.threads` threads: queue `q` from `map` (VNI → queue, 0 for
/// the rest), thread `k` by `s`'s rule (see the module docs).
pub fn thread_program(map: &[(u32, u32)], s: &Steering) -> io::Result<Vec<Insn>> {
    let n = u32::from(s.threads.max(1));
    let mut a = Asm::default();
    let (queued, v4, v6, claims, hash, fold, zero, ret) =
        (a.label(), a.label(), a.label(), a.label(), a.label(), a.label(), a.label(), a.label());
    // The queue: its first socket in M_QUEUE.
    a.ld_abs(BPF_W, VNI_AT).alu(BPF_RSH, 8).st(M_VNI);
    for &(vni, q) in map {
        let next = a.label();
        a.unless(BPF_JEQ, vni, next).ld_imm(q * n).ja(queued).at(next);
    }
    a.ld_imm(0).at(queued).st(M_QUEUE);
    // The inner frame.
    a.ld_imm(0).st(M_PROTO).st(M_SPORT).st(M_DPORT);
    a.ld_abs(BPF_H, ETHERTYPE_AT);
    let (not4, not6) = (a.label(), a.label());
    a.unless(BPF_JEQ, 0x0800, not4).ja(v4).at(not4);
    a.unless(BPF_JEQ, 0x86dd, not6).ja(v6).at(not6).ja(zero);

    // IPv4: addresses; protocol and ports unless a fragment.
    a.at(v4);
    let (is4, whole, ports, icmp, echo) = (a.label(), a.label(), a.label(), a.label(), a.label());
    a.ld_abs(BPF_B, IP_AT).alu(BPF_RSH, 4).jeq(4, is4).ja(zero).at(is4);
    a.ld_abs(BPF_W, IP_AT + 12).st(M_SRC).ld_abs(BPF_W, IP_AT + 16).st(M_DST);
    a.ld_abs(BPF_H, IP_AT + 6).alu(BPF_AND, 0x3fff).jeq(0, whole).ja(claims).at(whole);
    a.ld_abs(BPF_B, IP_AT + 9).st(M_PROTO);
    a.put(ins(BPF_LDX | BPF_B | BPF_MSH, IP_AT as u32));
    a.jeq(6, ports).jeq(17, ports).jeq(1, icmp).ja(claims);
    a.at(ports).ld_ind(BPF_W, IP_AT).st(M_TMP).alu(BPF_RSH, 16).st(M_SPORT).ld_mem(M_TMP).alu(BPF_AND, 0xffff).st(M_DPORT).ja(claims);
    a.at(icmp).ld_ind(BPF_B, IP_AT).jeq(0, echo).jeq(8, echo).ja(claims);
    a.at(echo).ld_ind(BPF_H, IP_AT + 4).st(M_DPORT);

    // The tenants' NATs, in order; the first that matches decides.
    a.at(claims);
    for c in &s.claims {
        claim(&mut a, c, n, fold, ret);
    }
    a.ja(hash);

    // IPv6: each address's words XORed; ports for TCP and UDP without extension headers.
    a.at(v6);
    for (at, m) in [(IP_AT + 8, M_SRC), (IP_AT + 24, M_DST)] {
        a.ld_abs(BPF_W, at).tax();
        for w in 1..4 {
            a.ld_abs(BPF_W, at + 4 * w).alu_x(BPF_XOR).tax();
        }
        a.st(m);
    }
    let ports6 = a.label();
    a.ld_abs(BPF_B, IP_AT + 6).jeq(6, ports6).jeq(17, ports6).ja(hash);
    a.at(ports6).ld_abs(BPF_W, IP_AT + 40).st(M_TMP).alu(BPF_RSH, 16).st(M_SPORT).ld_mem(M_TMP).alu(BPF_AND, 0xffff).st(M_DPORT);

    // The direction-free hash, folded, modulo the threads.
    a.at(hash).ld_mem(M_SRC).ldx_mem(M_DST).alu_x(BPF_XOR).ldx_mem(M_SPORT).alu_x(BPF_XOR).ldx_mem(M_DPORT).alu_x(BPF_XOR);
    a.at(fold).tax().alu(BPF_RSH, 16).alu_x(BPF_XOR).tax().alu(BPF_RSH, 8).alu_x(BPF_XOR).alu(BPF_MOD, n).ja(ret);
    a.at(zero).ld_imm(0);
    a.at(ret).ldx_mem(M_QUEUE).alu_x(BPF_ADD).put(ins(BPF_RET | BPF_A, 0));
    a.finish()
}
