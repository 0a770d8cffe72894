/* snic guest ABI, version 1: a tenant's NT as a WebAssembly module (docs/wasm.md).
 *
 * Build an NT with Debian's clang and lld, no libc:
 *   clang --target=wasm32 -O2 -nostdlib -Wl,--no-entry -o nt.wasm nt.c
 *
 * The node writes each packet's inner Ethernet frame into `snic_pkt.data` and its parsed
 * header offsets into the fields below, calls snic_process(len), and reads the verdict. The
 * module keeps whatever state it likes in its own linear memory (globals, static arrays); each
 * NT instance has its own memory, and nothing of another tenant is visible from it.
 */
#ifndef SNIC_NT_H
#define SNIC_NT_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define SNIC_EXPORT(name) __attribute__((export_name(name)))
#define SNIC_IMPORT(name) __attribute__((import_module("snic"), import_name(name)))

/* Frame capacity: the node requires at least 1912 bytes (its largest inner frame). */
#define SNIC_PKT_CAP 2048

/* The packet area (64-byte header, then the frame), little-endian as wasm is. */
struct snic_pkt {
  u32 len;        /* in: the frame's length; out: its new length (with SNIC_CHANGED) */
  u32 cap;        /* set by the module: SNIC_PKT_CAP */
  u32 tenant;     /* the tenant's id on this node */
  u32 vni;        /* the packet's VNI */
  u32 dag;        /* the node's number for the DAG's route */
  u32 step;       /* the step of that route */
  u16 l3_off;     /* offset of the IP/ARP header in data, SNIC_NONE if not parsed */
  u16 l4_off;     /* offset of the L4 header */
  u16 l3_end;     /* one past the IP packet */
  u8 l3;          /* SNIC_L3_* */
  u8 proto;       /* IP protocol */
  u16 src_port;   /* TCP/UDP ports, host order */
  u16 dst_port;
  u8 l4_flags;    /* TCP flags or ICMP type */
  u8 reserved0[3];
  u64 now_ns;     /* the node's clock */
  u8 reserved1[16];
  u8 data[SNIC_PKT_CAP];
};

_Static_assert(__builtin_offsetof(struct snic_pkt, now_ns) == 40, "ABI v1 header layout");
_Static_assert(__builtin_offsetof(struct snic_pkt, data) == 64, "ABI v1 header is 64 bytes");

#define SNIC_NONE 0xffff
#define SNIC_L3_NONE 0
#define SNIC_L3_ARP 1
#define SNIC_L3_IPV4 4
#define SNIC_L3_IPV6 6

/* Verdicts: snic_process returns one of these, with SNIC_CHANGED or'ed in if it rewrote data. */
#define SNIC_FORWARD 0
#define SNIC_DROP(code) (1 | (((code) & 0xff) << 8))
#define SNIC_SKIP 2 /* past the rest of this chain at this step */
#define SNIC_CHANGED (1 << 16)

/* Host functions. */
SNIC_IMPORT("now_ns") i64 snic_now_ns(void);
/* Counters 0..15 show in `snic status` and /metrics (snic_nt_counter_total{counter="c3"}). */
SNIC_IMPORT("counter_add") void snic_counter_add(int idx, i64 n);
SNIC_IMPORT("config_len") int snic_config_len(void);
SNIC_IMPORT("config_read") int snic_config_read(void *dst, int len);

/* Declares the packet area and its export; the module defines snic_process (and may define
 * snic_init, exported with SNIC_EXPORT("snic_init")). */
#define SNIC_PACKET_AREA(var)                                     \
  static struct snic_pkt var = {.cap = SNIC_PKT_CAP};             \
  SNIC_EXPORT("snic_packet") int snic_packet(void) { return (int)(long)&var; }

static inline u32 snic_be32(const u8 *p) { return ((u32)p[0] << 24) | ((u32)p[1] << 16) | ((u32)p[2] << 8) | p[3]; }
static inline u16 snic_be16(const u8 *p) { return (u16)((p[0] << 8) | p[1]); }

#endif
