/* A firewall as a tenant's own NT: ordered rules, first match wins, as the built-in `firewall`
 * decides (the tests check both on the same packets). Its `config` is text, one item a line:
 *
 *   default allow|deny              when no rule matches (allow)
 *   non_ip allow|deny               ARP and other non-IP frames (allow)
 *   allow|deny PROTO SRC DST SPORTS DPORTS
 *
 * PROTO is a number or *, SRC/DST an IPv4 prefix (10.0.0.0/8) or *, SPORTS/DPORTS a port or a
 * range (1000-2000) or *. A prefix never matches IPv6; ports match TCP and UDP only.
 * Counters: c0 packets allowed, c1 denied. Drop codes: 1 denied, 2 unreadable frame.
 */
#include "snic_nt.h"

#define MAX_RULES 256

struct rule {
  int allow, proto;           /* proto -1: any */
  u32 src, src_mask, dst, dst_mask;
  int v4_only;                /* a prefix was given */
  u32 sp_lo, sp_hi, dp_lo, dp_hi;
  int sp_any, dp_any;
};

static struct rule rules[MAX_RULES];
static int n_rules, default_allow = 1, non_ip_allow = 1;
static char cfg[65536];

SNIC_PACKET_AREA(pkt)

static const char *p, *end;

static void skip_space(void) { while (p < end && (*p == ' ' || *p == '\t')) p++; }
static int word_is(const char *w) {
  const char *q = p;
  while (*w) { if (q >= end || *q != *w) return 0; q++; w++; }
  if (q < end && *q != ' ' && *q != '\t' && *q != '\n') return 0;
  p = q;
  return 1;
}
static int number(u32 *out) {
  u32 v = 0; int digits = 0;
  while (p < end && *p >= '0' && *p <= '9') { v = v * 10 + (u32)(*p - '0'); p++; digits++; }
  *out = v;
  return digits > 0;
}
static int star(void) { if (p < end && *p == '*') { p++; return 1; } return 0; }
static int prefix(u32 *addr, u32 *mask, int *given) {
  skip_space();
  if (star()) { *addr = 0; *mask = 0; return 1; }
  u32 a = 0, b;
  for (int i = 0; i < 4; i++) {
    if (!number(&b) || b > 255) return 0;
    a = (a << 8) | b;
    if (i < 3) { if (p >= end || *p != '.') return 0; p++; }
  }
  u32 len = 32;
  if (p < end && *p == '/') { p++; if (!number(&len) || len > 32) return 0; }
  *mask = len == 0 ? 0 : 0xffffffffu << (32 - len);
  *addr = a & *mask;
  *given = 1;
  return 1;
}
static int ports(u32 *lo, u32 *hi, int *any) {
  skip_space();
  if (star()) { *any = 1; return 1; }
  if (!number(lo) || *lo > 65535) return 0;
  *hi = *lo;
  if (p < end && *p == '-') { p++; if (!number(hi) || *hi > 65535 || *hi < *lo) return 0; }
  *any = 0;
  return 1;
}

/* Parses the rules; a line it does not understand refuses the deployment (its number + 100). */
SNIC_EXPORT("snic_init") int snic_init(void) {
  int n = snic_config_read(cfg, sizeof cfg);
  p = cfg; end = cfg + n;
  for (int line = 1; p < end; line++) {
    skip_space();
    if (p < end && *p != '\n' && *p != '#') {
      struct rule *r = &rules[n_rules];
      if (word_is("default")) { skip_space(); if (word_is("allow")) default_allow = 1; else if (word_is("deny")) default_allow = 0; else return 100 + line; }
      else if (word_is("non_ip")) { skip_space(); if (word_is("allow")) non_ip_allow = 1; else if (word_is("deny")) non_ip_allow = 0; else return 100 + line; }
      else {
        if (n_rules == MAX_RULES) return 100 + line;
        if (word_is("allow")) r->allow = 1; else if (word_is("deny")) r->allow = 0; else return 100 + line;
        u32 proto; skip_space();
        if (star()) r->proto = -1; else if (number(&proto) && proto < 256) r->proto = (int)proto; else return 100 + line;
        r->v4_only = 0;
        if (!prefix(&r->src, &r->src_mask, &r->v4_only) || !prefix(&r->dst, &r->dst_mask, &r->v4_only)) return 100 + line;
        if (!ports(&r->sp_lo, &r->sp_hi, &r->sp_any) || !ports(&r->dp_lo, &r->dp_hi, &r->dp_any)) return 100 + line;
        n_rules++;
      }
      skip_space();
      if (p < end && *p != '\n' && *p != '#') return 100 + line;
    }
    while (p < end && *p != '\n') p++;
    if (p < end) p++;
  }
  return 0;
}

SNIC_EXPORT("snic_process") int snic_process(int len) {
  if (pkt.l3_off == SNIC_NONE) { snic_counter_add(1, 1); return SNIC_DROP(2); }
  if (pkt.l3 != SNIC_L3_IPV4 && pkt.l3 != SNIC_L3_IPV6) {
    if (non_ip_allow) { snic_counter_add(0, 1); return SNIC_FORWARD; }
    snic_counter_add(1, 1);
    return SNIC_DROP(1);
  }
  int v4 = pkt.l3 == SNIC_L3_IPV4;
  u32 src = 0, dst = 0;
  if (v4) { src = snic_be32(pkt.data + pkt.l3_off + 12); dst = snic_be32(pkt.data + pkt.l3_off + 16); }
  int has_ports = pkt.proto == 6 || pkt.proto == 17;
  int allow = default_allow;
  for (int i = 0; i < n_rules; i++) {
    const struct rule *r = &rules[i];
    if (r->proto >= 0 && r->proto != pkt.proto) continue;
    if (r->v4_only) {
      if (!v4) continue;
      if ((src & r->src_mask) != r->src || (dst & r->dst_mask) != r->dst) continue;
    }
    if (!r->sp_any && (!has_ports || pkt.src_port < r->sp_lo || pkt.src_port > r->sp_hi)) continue;
    if (!r->dp_any && (!has_ports || pkt.dst_port < r->dp_lo || pkt.dst_port > r->dp_hi)) continue;
    allow = r->allow;
    break;
  }
  (void)len;
  if (allow) { snic_counter_add(0, 1); return SNIC_FORWARD; }
  snic_counter_add(1, 1);
  return SNIC_DROP(1);
}
