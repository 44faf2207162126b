/* nfc server runtime: the packet model the generated code (nf.c) works on, bit-field
 * accessors, checksums and hashes.  Hand-written, shared by every generated program. */
#ifndef NFC_RT_H
#define NFC_RT_H

#include <stdint.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_hash.h>

#define NFC_MAX_INST 32
#define NFC_MAX_HDR 64
#define NFC_MAX_META 64
#define NFC_MAX_RES 64
#define NFC_MAX_PKT 9216
#ifndef NFC_TABLE_CAP /* tables hold min(size estimate, NFC_TABLE_CAP) entries: -DNFC_TABLE_CAP=... */
#define NFC_TABLE_CAP (1u << 20)
#endif

enum { NFC_CONTINUE = 0 };

/* Counters of one forwarding lcore (summed on read: no sharing between lcores). */
#define NFC_MAX_TABLES 64
struct nfc_stats {
    uint64_t forwarded;
    uint64_t no_port;
    uint64_t drops[256]; /* by reason code; 0: no mbuf to send on */
    uint64_t hits[NFC_MAX_TABLES];
    uint64_t misses[NFC_MAX_TABLES];
} __attribute__((aligned(64)));

struct nfc_pkt {
    struct nfc_stats *stats;
    uint8_t valid[NFC_MAX_INST];
    uint8_t hdr[NFC_MAX_INST][NFC_MAX_HDR];
    uint64_t meta[NFC_MAX_META];
    uint64_t res[NFC_MAX_RES];
    uint64_t ingress_port;
    uint64_t egress;
    int egress_set;
    const uint8_t *payload;
    uint32_t payload_len;
    uint32_t cut; /* the bridge the packet arrived behind */
};

/* Bits [off, off + w) of p, most significant bit first (network order), 1 <= w <= 64:
 * the (at most 9) bytes holding them are read whole, then shifted and masked. */
static inline uint64_t nfc_get(const uint8_t *p, unsigned off, unsigned w)
{
    unsigned first = off >> 3, last = (off + w - 1) >> 3, tail = 7 - ((off + w - 1) & 7);
    unsigned __int128 v = 0;
    for (unsigned i = first; i <= last; i++)
        v = (v << 8) | p[i];
    return (uint64_t)((v >> tail) & ((((unsigned __int128)1) << w) - 1));
}

static inline void nfc_set(uint8_t *p, unsigned off, unsigned w, uint64_t v)
{
    unsigned first = off >> 3, last = (off + w - 1) >> 3, tail = 7 - ((off + w - 1) & 7);
    unsigned __int128 cur = 0;
    for (unsigned i = first; i <= last; i++)
        cur = (cur << 8) | p[i];
    unsigned __int128 m = ((((unsigned __int128)1) << w) - 1) << tail;
    cur = (cur & ~m) | ((((unsigned __int128)v) << tail) & m);
    for (unsigned i = last + 1; i-- > first;) {
        p[i] = (uint8_t)cur;
        cur >>= 8;
    }
}

static inline uint64_t nfc_mask(unsigned w)
{
    return w >= 64 ? ~0ull : ((1ull << w) - 1);
}

/* RFC 1071 */
static inline uint16_t nfc_csum(const uint8_t *p, unsigned len)
{
    uint32_t s = 0;
    for (unsigned i = 0; i + 1 < len; i += 2)
        s += (uint32_t)((p[i] << 8) | p[i + 1]);
    if (len & 1)
        s += (uint32_t)(p[len - 1] << 8);
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

/* CRC-16/ARC and CRC-32 (IEEE) of the first `bits` bits of p, zero-padded to bytes. */
static inline uint64_t nfc_crc16(const uint8_t *p, unsigned bytes)
{
    uint16_t crc = 0;
    for (unsigned i = 0; i < bytes; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (uint16_t)((crc >> 1) ^ 0xA001) : (uint16_t)(crc >> 1);
    }
    return crc;
}

static inline uint64_t nfc_crc32(const uint8_t *p, unsigned bytes)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (unsigned i = 0; i < bytes; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return crc ^ 0xFFFFFFFFu;
}

/* Nanoseconds since the first call: the clock of data-plane state timeouts. */
static inline uint64_t nfc_now_ns(void)
{
    static uint64_t start;
    uint64_t t = rte_get_timer_cycles();
    if (start == 0)
        start = t;
    return (uint64_t)((double)(t - start) * 1e9 / (double)rte_get_timer_hz());
}

/* RFC 1624 eqn. 3: the Internet checksum after a 16- or 32-bit value changed. */
static inline uint64_t nfc_csum_update(uint64_t csum, uint64_t old, uint64_t new_, unsigned width)
{
    uint32_t s = (uint32_t)(~csum & 0xffff);
    for (int shift = (int)width - 16; shift >= 0; shift -= 16)
        s += (uint32_t)((~(old >> shift)) & 0xffff) + (uint32_t)((new_ >> shift) & 0xffff);
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint64_t)(~s & 0xffff);
}

/* Port pools of a carrier-grade NAT: the lowest free port >= 1024 of an external address. */
#define NFC_POOLS 256
static inline uint64_t nfc_alloc_port(uint64_t ext_ip)
{
    static uint64_t addr[NFC_POOLS];
    static uint64_t used[NFC_POOLS][1024];
    static int npools;
    int k = 0;
    while (k < npools && addr[k] != ext_ip)
        k++;
    if (k == npools) {
        if (npools == NFC_POOLS)
            return 0;
        addr[npools++] = ext_ip;
    }
    for (unsigned port = 1024; port < 65536; port++)
        if (!((used[k][port >> 6] >> (port & 63)) & 1)) {
            used[k][port >> 6] |= 1ull << (port & 63);
            return port;
        }
    return 0;
}

/* Longest-prefix match as one hash table keyed by (fields, prefix masked to its length,
 * length): try the lengths present (bitmap `plens`), longest first.  `key` holds the
 * lookup's fields with the full LPM value at bits [off, off + w); the length byte is at
 * bit `len_off`. */
static inline int nfc_lpm_lookup(struct rte_hash *h, const volatile uint64_t *plens, uint8_t *key, unsigned off, unsigned w,
                                 unsigned len_off, void **data)
{
    uint64_t value = nfc_get(key, off, w);
    for (int plen = (int)w; plen >= 0; plen--) {
        if (!((plens[plen >> 6] >> (plen & 63)) & 1))
            continue;
        uint64_t keep = plen == 0 ? 0 : (plen >= 64 ? ~0ull : ~((1ull << (w - (unsigned)plen)) - 1));
        nfc_set(key, off, w, value & keep & nfc_mask(w));
        nfc_set(key, len_off, 8, (uint64_t)plen);
        if (rte_hash_lookup_data(h, key, data) >= 0)
            return 1;
    }
    return 0;
}

/* A server table as the generated program describes it (nfc_tables[], in nf.c) plus its
 * run-time state.  Keys are the key fields packed most significant bit first, an LPM field
 * masked to its prefix length with the length in the byte after the fields, zero-padded to
 * key_bytes (a multiple of 16: rte_hash is ~2x slower on other lengths).  An entry's data:
 * with inline_values, the values packed into rte_hash's data word itself (value 0 in the
 * low bits); otherwise a malloc'ed uint64_t array: the values, then for data-plane state the
 * expiry and the timeout (ns). */
#define NFC_MAX_FIELDS 16
#define NFC_MAX_KEY 64 /* key bytes */
struct nfc_table {
    const char *name;
    const char *src; /* the .nfp file:line of the table */
    uint32_t size;   /* the .nfp size estimate (capacity: min(size, NFC_TABLE_CAP)) */
    uint8_t nkeys;
    uint8_t nvalues;
    int8_t lpm;    /* index of the LPM key field, -1: none */
    uint8_t state; /* data-plane state: written by the forwarding lcore, not the control plane */
    uint8_t inline_values;
    uint16_t key_bytes;
    uint8_t key_width[NFC_MAX_FIELDS];
    uint8_t value_width[NFC_MAX_FIELDS];
    uint64_t timeout_ns; /* state: the default idle timeout */
    /* run time */
    struct rte_hash *h;
    volatile uint64_t plens[2]; /* LPM: the prefix lengths present (bit per length) */
    uint32_t plen_count[65];    /* LPM: entries per prefix length (control thread only) */
};

/* Implemented by the generated nf.c */
extern struct nfc_table nfc_tables[];
extern const int nfc_ntables;
extern const char nfc_program[]; /* the NF's name: the control channel's HELLO reports it */
int nfc_from_switch(struct nfc_pkt *p, const uint8_t *data, uint32_t len, uint32_t port);
int nfc_run(struct nfc_pkt *p);
uint32_t nfc_to_switch(const struct nfc_pkt *p, uint8_t *out, uint32_t cap);
const char *nfc_reason(int code);
int nfc_bench_key(int table, const struct nfc_pkt *p, uint8_t *key);
extern const int nfc_nreasons;
extern const int nfc_software;

/* Implemented by nfc_tables.c: table set-up and the entry operations every writer uses
 * (entries file, control channel).  Status codes are the control channel's (nfc_control.h). */
int nfc_tables_init(int lcores);
int nfc_table_find(const char *name);
int nfc_entry_check(const struct nfc_table *t, const uint64_t *keys, const uint64_t *values, uint8_t *key);
int nfc_entry_add(struct nfc_table *t, const uint64_t *keys, const uint64_t *values, int replace);
int nfc_entry_read(const struct nfc_table *t, const uint64_t *keys, uint64_t *values);
void nfc_values_of(const struct nfc_table *t, const void *data, uint64_t *values);
int nfc_batch(struct nfc_table *t, int op, const uint64_t *rec, uint32_t n, uint32_t stride, uint32_t *bad);
void nfc_rcu_online(unsigned lcore);
void nfc_rcu_quiescent(unsigned lcore);
void nfc_rcu_offline(unsigned lcore);
/* Implemented by nfc_entries.c */
int nfc_load_entries(const char *path);
/* Implemented by nfc_main.c: the counters of every lcore */
extern struct nfc_stats nfc_stats[];

#endif
