/* A per-flow rate limiter as a tenant's own NT: each flow (IP protocol, addresses and ports)
 * gets a token bucket; a packet finding its bucket empty is dropped (code 1). State lives in the
 * module's own memory: a table of 4096 flows, a new flow taking the slot of the one least
 * recently seen in its set of four.
 *
 * `config`: "rate PPS burst N" (defaults: rate 1000, burst 100). Non-IP frames pass.
 * Counters: c0 packets passed, c1 limited, c2 flows evicted.
 */
#include "snic_nt.h"

#define SETS 1024
#define WAYS 4

struct flow {
  u64 key_hi, key_lo;  /* a 128-bit fold of the 5-tuple; 0/0 = empty */
  u64 last_ns;
  u64 tokens_milli;    /* tokens x 1000 */
};

static struct flow table[SETS][WAYS];
static u64 rate = 1000, burst = 100;
static char cfg[256];

SNIC_PACKET_AREA(pkt)

static u64 read_num(const char **p, const char *end) {
  u64 v = 0;
  while (*p < end && (**p == ' ')) (*p)++;
  while (*p < end && **p >= '0' && **p <= '9') { v = v * 10 + (u64)(**p - '0'); (*p)++; }
  return v;
}

SNIC_EXPORT("snic_init") int snic_init(void) {
  int n = snic_config_read(cfg, sizeof cfg);
  const char *p = cfg, *end = cfg + n;
  while (p < end) {
    while (p < end && (*p == ' ' || *p == '\n')) p++;
    if (end - p >= 4 && p[0] == 'r' && p[1] == 'a' && p[2] == 't' && p[3] == 'e') { p += 4; rate = read_num(&p, end); }
    else if (end - p >= 5 && p[0] == 'b' && p[1] == 'u' && p[2] == 'r' && p[3] == 's' && p[4] == 't') { p += 5; burst = read_num(&p, end); }
    else if (p < end) return 1;
  }
  return rate == 0 || burst == 0 ? 2 : 0;
}

static u64 mix(u64 x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
  return x;
}

SNIC_EXPORT("snic_process") int snic_process(int len) {
  (void)len;
  if (pkt.l3 != SNIC_L3_IPV4 && pkt.l3 != SNIC_L3_IPV6) return SNIC_FORWARD;
  const u8 *ip = pkt.data + pkt.l3_off;
  u64 hi = ((u64)pkt.proto << 32) | ((u64)pkt.src_port << 16) | pkt.dst_port, lo = 0;
  int alen = pkt.l3 == SNIC_L3_IPV4 ? 4 : 16, src = pkt.l3 == SNIC_L3_IPV4 ? 12 : 8;
  for (int i = 0; i < 2 * alen; i++) lo = lo * 131 + ip[src + i];
  hi = mix(hi ^ mix(lo)) | 1; /* never 0: 0 marks an empty slot */
  struct flow *set = table[(hi >> 20) % SETS], *f = 0, *oldest = &set[0];
  for (int w = 0; w < WAYS; w++) {
    if (set[w].key_hi == hi && set[w].key_lo == lo) { f = &set[w]; break; }
    if (set[w].last_ns < oldest->last_ns) oldest = &set[w];
  }
  u64 now = pkt.now_ns;
  if (!f) {
    if (oldest->key_hi) snic_counter_add(2, 1);
    f = oldest;
    f->key_hi = hi; f->key_lo = lo; f->last_ns = now; f->tokens_milli = burst * 1000;
  }
  u64 dt = now > f->last_ns ? now - f->last_ns : 0;
  f->last_ns = now;
  /* tokens += rate * dt, in thousandths of a token, capped at the burst */
  u64 add = dt >= 1000000000ull ? burst * 1000 : rate * dt / 1000000;
  f->tokens_milli = f->tokens_milli + add > burst * 1000 ? burst * 1000 : f->tokens_milli + add;
  if (f->tokens_milli >= 1000) { f->tokens_milli -= 1000; snic_counter_add(0, 1); return SNIC_FORWARD; }
  snic_counter_add(1, 1);
  return SNIC_DROP(1);
}
