/* nfc server runtime: the packet model the generated code (nf.c) works on, bit-field
 * accessors, checksums and hashes.  Hand-written, shared by every generated program. */
#ifndef NFC_RT_H
#define NFC_RT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_mbuf.h>

/* The packet model's slots, sized for the program by the generated nfc_prog.h (header
 * instances, bytes of a pushed header, metadata and locals, lookup results): a burst of
 * nfc_pkt stays in the L1 cache.  Without it (the runtime's own tests), the generator's limits. */
#if defined(__has_include)
#if __has_include("nfc_prog.h")
#include "nfc_prog.h"
#endif
#endif
#ifndef NFC_MAX_INST
#define NFC_MAX_INST 32
#define NFC_MAX_HDR 64
#define NFC_MAX_META 64
#define NFC_MAX_RES 64
#endif
#define NFC_MAX_PKT 9216
/* a jumbo mbuf holds a whole frame up to NFC_MAX_PKT (9216 bytes) in one segment: the packet
 * path reads contiguous bytes, so a frame received over several 2 KiB segments is copied into
 * one first (nfc_burst.h), and an output too big for a 2 KiB mbuf is written into one */
#define NFC_MBUF_ROOM (NFC_MAX_PKT + RTE_PKTMBUF_HEADROOM)
/* The tables' layout: nfc_prog.h has the server profile's ([memory] in
 * stdlib/targets/dpdk_server.toml, which the compiler's memory model reads); these are its
 * values, for a build without nfc_prog.h.  Data-plane state tables hold min(size estimate,
 * NFC_TABLE_CAP) entries, with room for NFC_TABLE_CAP / NFC_STATE_ROOM_DIV + NFC_STATE_ROOM_ADD
 * removed keys (nfc_state_slots); control-plane tables start with room for their size estimate
 * below 7/8 full, at most NFC_GROW_FROM entries, and grow NFC_GROW_BY times whenever they are
 * 7/8 full (not past the room of their size while within it; past it, by 1/NFC_GROW_PAST_DIV
 * of their capacity), or straight to what a batch or an entries file needs when that is more, as far as
 * memory goes (nfc_tables.c); values of at most NFC_INLINE_BITS (an LPM table's: _LPM_BITS,
 * _LPM6_BITS for a field over 64 bits) are kept in the data word (the generated table's
 * inline_values). */
#ifndef NFC_TABLE_CAP
#define NFC_TABLE_CAP (1u << 20)
#endif
#ifndef NFC_GROW_FROM
#define NFC_GROW_FROM 1024u
#endif
#ifndef NFC_GROW_BY
#define NFC_GROW_BY 4u
#endif
#ifndef NFC_GROW_PAST_DIV
#define NFC_GROW_PAST_DIV 4u
#endif
#ifndef NFC_STATE_ROOM_DIV
#define NFC_STATE_ROOM_DIV 8u
#endif
#ifndef NFC_STATE_ROOM_ADD
#define NFC_STATE_ROOM_ADD 64u
#endif
#ifndef NFC_INLINE_BITS
#define NFC_INLINE_BITS 64
#endif
#ifndef NFC_INLINE_LPM_BITS
#define NFC_INLINE_LPM_BITS 56
#endif
#ifndef NFC_INLINE_LPM6_BITS
#define NFC_INLINE_LPM6_BITS 55
#endif
_Static_assert(NFC_GROW_FROM >= 8 && NFC_GROW_BY >= 2 && NFC_GROW_PAST_DIV >= 1 && NFC_STATE_ROOM_DIV >= 1,
               "the server profile's [memory] grow_from, grow_by, grow_past_div, state_room_div");
_Static_assert(NFC_INLINE_BITS <= 64, "the server profile's [memory] inline_value_bits: a data word has 64");

enum { NFC_CONTINUE = 0 };
/* nfc_run's codes from here up are punts (a punt reason each), below it drops */
#define NFC_PUNT_BASE 128

/* Counters of one forwarding lcore (summed on read: no sharing between lcores). */
#define NFC_MAX_TABLES 64
struct nfc_stats {
    uint64_t forwarded;
    uint64_t no_port;
    uint64_t drops[256]; /* by reason code; 0: no mbuf to send on */
    uint64_t hits[NFC_MAX_TABLES];
    uint64_t misses[NFC_MAX_TABLES];
} __attribute__((aligned(64)));

#ifndef NFC_PRE_TABLES /* nfc_prog.h has the program's (within targets/dpdk/lower.py PRE_TABLES, PRE_KEY) */
#define NFC_PRE_TABLES 8
#define NFC_PRE_KEY 32 /* keys up to this many bytes are remembered */
#endif

struct nfc_pkt {
    struct nfc_stats *stats;
    uint8_t valid[NFC_MAX_INST];
    /* a valid header's bytes: where the packet has them (extracted; changed in place), or in
     * store (pushed) */
    uint8_t *hdr[NFC_MAX_INST];
    uint8_t store[NFC_MAX_INST][NFC_MAX_HDR];
    uint64_t meta[NFC_MAX_META];
    uint64_t res[NFC_MAX_RES];
    uint64_t ingress_port;
    uint64_t egress;
    int egress_set;
    const uint8_t *payload;
    uint32_t payload_len;
    uint32_t cut; /* the bridge the packet arrived behind */
    uint8_t *esp_buf; /* ESP: where the payload is encrypted or decrypted (nfc_esp.h), made on first use */
    /* ESP: the buffer the packet's bytes are in, when it may be changed in place there (a direct
     * mbuf of ours: nfc_burst sets them for a program that uses ESP); NULL: it may not */
    uint8_t *buf_start, *buf_end;
    /* ESP: an encryption of the payload is queued for the end of the burst (nfc_esp_batch_end),
     * and whether one failed there (the packet is then dropped as crypto_unavailable) */
    uint8_t esp_pending, esp_failed;
    /* the burst's prefetched lookups of tables 0..NFC_PRE_TABLES-1 (bit t of pre_ok: valid) */
    uint32_t pre_ok;
    uint8_t pre_hit[NFC_PRE_TABLES];
    void *pre_data[NFC_PRE_TABLES];
    uint8_t pre_key[NFC_PRE_TABLES][NFC_PRE_KEY];
};

/* Byte-aligned network-order fields of 8, 16, 32 and 64 bits at p: nfc_get(p, 0, N) and
 * nfc_set(p, 0, N, v) as single loads and stores (memcpy: p need not be aligned). */
static inline uint64_t nfc_get8(const uint8_t *p)
{
    return p[0];
}

static inline uint64_t nfc_get16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return rte_be_to_cpu_16(v);
}

static inline uint64_t nfc_get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return rte_be_to_cpu_32(v);
}

static inline uint64_t nfc_get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return rte_be_to_cpu_64(v);
}

static inline void nfc_set8(uint8_t *p, uint64_t v)
{
    p[0] = (uint8_t)v;
}

static inline void nfc_set16(uint8_t *p, uint64_t v)
{
    uint16_t x = rte_cpu_to_be_16((uint16_t)v);
    memcpy(p, &x, sizeof x);
}

static inline void nfc_set32(uint8_t *p, uint64_t v)
{
    uint32_t x = rte_cpu_to_be_32((uint32_t)v);
    memcpy(p, &x, sizeof x);
}

static inline void nfc_set64(uint8_t *p, uint64_t v)
{
    uint64_t x = rte_cpu_to_be_64(v);
    memcpy(p, &x, sizeof x);
}

/* The n (1..8) bytes at p as a big-endian number, and back: loads and stores of 4, 2 and 1
 * bytes in registers (through memory, the parts would be stored and read back whole, which
 * stalls store forwarding). */
static inline uint64_t nfc_load_be(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    unsigned i = 0;
    if (n - i >= 4) {
        v = nfc_get32(p);
        i += 4;
    }
    if (n - i >= 4) {
        v = (v << 32) | nfc_get32(p + i);
        i += 4;
    }
    if (n - i >= 2) {
        v = (v << 16) | nfc_get16(p + i);
        i += 2;
    }
    if (n - i >= 1)
        v = (v << 8) | p[i];
    return v;
}

static inline void nfc_store_be(uint8_t *p, unsigned n, uint64_t v)
{
    unsigned i = 0;
    if (n - i >= 4) {
        nfc_set32(p, v >> (8 * (n - 4)));
        i += 4;
    }
    if (n - i >= 4) {
        nfc_set32(p + i, v >> (8 * (n - i - 4)));
        i += 4;
    }
    if (n - i >= 2) {
        nfc_set16(p + i, v >> (8 * (n - i - 2)));
        i += 2;
    }
    if (n - i >= 1)
        p[i] = (uint8_t)v;
}

/* Bits [off, off + w) of p, most significant bit first (network order), 1 <= w <= 64:
 * the (at most 9) bytes holding them are read whole, then shifted and masked.  A span of up
 * to 8 bytes (every field but unaligned ones wider than 56 bits) stays in 64 bits, read
 * and written with nfc_load_be / nfc_store_be; the generator calls the nfc_getN / nfc_setN
 * above for byte-aligned 8/16/32/64-bit fields. */
static inline uint64_t nfc_get(const uint8_t *p, unsigned off, unsigned w)
{
    unsigned first = off >> 3, last = (off + w - 1) >> 3, tail = 7 - ((off + w - 1) & 7);
    if (last - first < 8) {
        return (nfc_load_be(p + first, last - first + 1) >> tail) & (w >= 64 ? ~0ull : (1ull << w) - 1);
    }
    unsigned __int128 v = 0;
    for (unsigned i = first; i <= last; i++)
        v = (v << 8) | p[i];
    return (uint64_t)((v >> tail) & ((((unsigned __int128)1) << w) - 1));
}

static inline void nfc_set(uint8_t *p, unsigned off, unsigned w, uint64_t v)
{
    unsigned first = off >> 3, last = (off + w - 1) >> 3, tail = 7 - ((off + w - 1) & 7);
    if (last - first < 8) {
        unsigned n = last - first + 1;
        uint64_t m = (w >= 64 ? ~0ull : (1ull << w) - 1) << tail;
        nfc_store_be(p + first, n, (nfc_load_be(p + first, n) & ~m) | ((v << tail) & m));
        return;
    }
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

/* Fields of 65 to 128 bits (IPv6 addresses, keys) are unsigned __int128 values in the
 * generated code; nfc_getw / nfc_setw read and write any field of 1..128 bits.  The control
 * channel and the records of table values carry a field as nfc_words(w) 64-bit words, least
 * significant first (docs/control.md). */
typedef unsigned __int128 nfc_u128;
#define NFC_MAX_WIDTH 128
#define NFC_U128(hi, lo) (((nfc_u128)(hi) << 64) | (nfc_u128)(lo))

/* The init value of rte_hash_crc for an rte_hash of keys of key_len bytes (every rte_hash of
 * the runtime: nfc_hash_new below).  DPDK 22.11's rte_hash mistakes the all-zero
 * key for an empty bucket slot when that key's 16-bit signature is 0, as rte_hash_crc's of zeros
 * is with an init value of 0: a writer's search for the key (search_and_update) stops at an
 * empty slot, compares the key with the reserved key slot 0 (zeros), and reports it absent, so
 * an add of the present key makes a second entry, and lookups still find the first (a state
 * record retired twice, tests/c/zero_key_check.c).  An empty slot's signature is 0 (a delete
 * clears it), so an init value that gives the all-zero key a signature other than 0 avoids it. */
static inline uint32_t nfc_hash_seed(uint32_t key_len)
{
    static const uint64_t zeros[32]; /* longer than any key */
    uint32_t seed = 0x9e3779b9u;
    while (key_len <= sizeof zeros && (rte_hash_crc(zeros, key_len, seed) >> 16) == 0)
        seed++;
    return seed;
}

/* Every rte_hash of the runtime, made here so that none misses the seed: `entries` keys of
 * key_len bytes on this lcore's socket, hashed by rte_hash_crc; extra_flag says who may read
 * and write at once (RTE_HASH_EXTRA_FLAGS_*).  NULL with rte_errno set when it cannot be made. */
static inline struct rte_hash *nfc_hash_new(const char *name, uint32_t entries, uint32_t key_len, uint8_t extra_flag)
{
    struct rte_hash_parameters params = {
        .name = name,
        .entries = entries,
        .key_len = key_len,
        .hash_func = rte_hash_crc,
        .hash_func_init_val = nfc_hash_seed(key_len),
        .socket_id = (int)rte_socket_id(),
        .extra_flag = extra_flag,
    };
    return rte_hash_create(&params);
}

static inline unsigned nfc_words(unsigned w)
{
    return (w + 63) / 64;
}

static inline nfc_u128 nfc_getw(const uint8_t *p, unsigned off, unsigned w)
{
    if (w <= 64)
        return nfc_get(p, off, w);
    return ((nfc_u128)nfc_get(p, off, w - 64) << 64) | nfc_get(p, off + w - 64, 64);
}

static inline void nfc_setw(uint8_t *p, unsigned off, unsigned w, nfc_u128 v)
{
    if (w <= 64) {
        nfc_set(p, off, w, (uint64_t)v);
        return;
    }
    nfc_set(p, off, w - 64, (uint64_t)(v >> 64));
    nfc_set(p, off + w - 64, 64, (uint64_t)v);
}

static inline nfc_u128 nfc_maskw(unsigned w)
{
    return w >= 128 ? ~(nfc_u128)0 : (((nfc_u128)1 << w) - 1);
}

/* A field of w bits from its words (least significant first), and back. */
static inline nfc_u128 nfc_from_words(const uint64_t *words, unsigned w)
{
    return w <= 64 ? words[0] : NFC_U128(words[1], words[0]);
}

static inline void nfc_to_words(nfc_u128 v, unsigned w, uint64_t *words)
{
    words[0] = (uint64_t)v;
    if (w > 64)
        words[1] = (uint64_t)(v >> 64);
}

/* A register (an array the generated nf.c declares for each one its stages use): shared by
 * the forwarding lcores, read and written with relaxed atomic loads and stores, so a read sees
 * a whole value; a read-modify-write in a stage is not atomic across lcores.  An index out of
 * range reads 0 and writes nothing (the reference semantics). */
static inline uint64_t nfc_reg_get(const uint64_t *reg, uint64_t size, uint64_t i)
{
    return i < size ? __atomic_load_n(&reg[i], __ATOMIC_RELAXED) : 0;
}

static inline void nfc_reg_set(uint64_t *reg, uint64_t size, uint64_t i, uint64_t v)
{
    if (i < size)
        __atomic_store_n(&reg[i], v, __ATOMIC_RELAXED);
}

#include "nfc_objects.h"

#define NFC_MAX_KEY 64 /* key bytes */
#include "nfc_lpm.h"
#include "nfc_acl.h"

/* RFC 1071, in two halves: the plain sum of the words as the host loads them (32 bits at a
 * time; the one's-complement sum is independent of byte order, RFC 1071 2.(B)), then the
 * fold and the conversion to network order.  nfc_csum_sum_zero takes the 16-bit field at
 * byte `at` as 0 without writing p (for a header's own checksum, computed from the source
 * before it is copied: reading back a header just stored in pieces stalls store forwarding):
 * its bytes are masked out of the words that hold them (the masks fold to constants where len
 * and at are, as in the generated code; x86 loads little-endian, byte k of a word is its bits
 * 8k..8k+7).  at = len: no field. */
_Static_assert(RTE_BYTE_ORDER == RTE_LITTLE_ENDIAN, "nfc_csum_keep's masks: byte k of a loaded word is its bits 8k..");
static inline uint32_t nfc_csum_keep(unsigned i, unsigned w, unsigned at)
{
    uint32_t keep = w == 4 ? 0xffffffffu : (1u << (8 * w)) - 1; /* the w bytes at i, less at and at + 1 */
    for (unsigned b = at; b < at + 2; b++)
        if (b >= i && b < i + w)
            keep &= ~(0xffu << (8 * (b - i)));
    return keep;
}

static inline uint64_t nfc_csum_sum_zero(const uint8_t *p, unsigned len, unsigned at)
{
    uint64_t s = 0;
    unsigned i = 0;
#pragma GCC unroll 16 /* len is a constant where the generated code calls it: straight loads */
    for (; i + 4 <= len; i += 4) {
        uint32_t w;
        memcpy(&w, p + i, sizeof w);
        s += at < len ? w & nfc_csum_keep(i, 4, at) : w;
    }
    if (i + 2 <= len) {
        uint16_t w;
        memcpy(&w, p + i, sizeof w);
        s += w & nfc_csum_keep(i, 2, at);
        i += 2;
    }
    if (i < len) /* the last byte of an odd length: the high byte of a zero-padded word */
        s += p[i] & nfc_csum_keep(i, 1, at);
    return s;
}

static inline uint64_t nfc_csum_sum(const uint8_t *p, unsigned len)
{
    return nfc_csum_sum_zero(p, len, len);
}

/* The plain sum folded to 16 bits, as the words were loaded (network order once stored):
 * 64 -> 32 bits with the end-around carry, then 32 -> 16 as RFC 1071 4.1's fold, by adding
 * the word rotated by 16 (the high half then holds both halves' sum with its carry). */
static inline uint16_t nfc_csum_fold16(uint64_t s)
{
    uint32_t lo = (uint32_t)s, r = lo + (uint32_t)(s >> 32);
    r += r < lo;
    return (uint16_t)((r + (r << 16 | r >> 16)) >> 16);
}

static inline uint16_t nfc_csum_fold(uint64_t s)
{
    return (uint16_t)~rte_be_to_cpu_16(nfc_csum_fold16(s));
}

static inline uint16_t nfc_csum(const uint8_t *p, unsigned len)
{
    return nfc_csum_fold(nfc_csum_sum(p, len));
}

/* The Internet checksum of p[0..len) with the 2-byte field at `at` taken as zero, stored at
 * `out` (2 bytes) in network order, as the generated code writes a header's checksum: the
 * folded sum of the words as loaded is already in network order once stored (RFC 1071
 * 2.(B)), so no byte swap to the host's order and back (the compiler keeps both swaps). */
static inline void nfc_csum_put(uint8_t *out, const uint8_t *p, unsigned len, unsigned at)
{
    uint16_t raw = (uint16_t)~nfc_csum_fold16(nfc_csum_sum_zero(p, len, at));
    memcpy(out, &raw, sizeof raw);
}

/* CRC-16/ARC and CRC-32 (IEEE 802.3) of `bytes` bytes at p, both reflected: eight bytes a step
 * (slicing-by-8, four loads that do not wait on each other), then a byte a step.  nfc_crc_t[0]
 * is CRC-16/ARC's tables, nfc_crc_t[1] CRC-32's: t[0] the byte-at-a-time table, t[k][i] the
 * CRC of byte i followed by k zero bytes (filled before main: nfc_tables.c). */
extern uint32_t nfc_crc_t[2][8][256];
static inline uint32_t nfc_crc_reflected(const uint32_t t[8][256], uint32_t crc, const uint8_t *p, unsigned bytes)
{
    unsigned i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        x = rte_le_to_cpu_64(x) ^ crc; /* p[i] in the low byte: the first in, the most bytes after it */
        crc = t[7][x & 0xff] ^ t[6][(x >> 8) & 0xff] ^ t[5][(x >> 16) & 0xff] ^ t[4][(x >> 24) & 0xff] ^
              t[3][(x >> 32) & 0xff] ^ t[2][(x >> 40) & 0xff] ^ t[1][(x >> 48) & 0xff] ^ t[0][x >> 56];
    }
    for (; i < bytes; i++)
        crc = (crc >> 8) ^ t[0][(crc ^ p[i]) & 0xff];
    return crc;
}

static inline uint64_t nfc_crc16(const uint8_t *p, unsigned bytes)
{
    return nfc_crc_reflected(nfc_crc_t[0], 0, p, bytes);
}

static inline uint64_t nfc_crc32(const uint8_t *p, unsigned bytes)
{
    return nfc_crc_reflected(nfc_crc_t[1], 0xFFFFFFFFu, p, bytes) ^ 0xFFFFFFFFu;
}

/* Nanoseconds since nfc_tables_init: the clock of data-plane state timeouts.  One origin for
 * every translation unit (a function-local static would be one per file: the control
 * thread's DUMP compares expiries the generated nf.c wrote). */
extern uint64_t nfc_clock_origin; /* timer cycles at nfc_tables_init */
static inline uint64_t nfc_now_ns(void)
{
    return (uint64_t)((double)(rte_get_timer_cycles() - nfc_clock_origin) * 1e9 / (double)rte_get_timer_hz());
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

/* A server table as the generated program describes it (nfc_tables[], in nf.c) plus its
 * run-time state.  Keys are the key fields packed most significant bit first, an LPM field
 * masked to its prefix length with the length in the byte after the fields, zero-padded to
 * key_bytes (a multiple of 16: rte_hash is ~2x slower on other lengths).  An entry's data:
 * with inline_values, the values packed into rte_hash's data word itself (value 0 in the
 * low bits); otherwise a record (nfc_values.c): the values, then for data-plane state the
 * expiry and the timeout (ns).  An LPM table's rte_hash holds its routes for the control
 * plane; packets look them up in its trie (nfc_lpm.h), whose entries keep the same data
 * words in 56 bits (so inline values of an LPM table fit in 56; 55 with an LPM field over 64
 * bits, nfc_lpm.h). */
#define NFC_MAX_FIELDS 16
#define NFC_MAX_LINKS 4 /* state tables a switch-cached state's hit arm refreshes */
#define NFC_CTL_RCU_THREAD RTE_MAX_LCORE /* the control thread's id in nfc_rcu (no lcore has it) */
struct nfc_table {
    const char *name;
    const char *src; /* the .nfp file:line of the table */
    uint32_t size;   /* the .nfp size estimate */
    uint8_t nkeys;
    uint8_t nvalues;
    int8_t lpm;    /* index of the LPM key field, -1: none (an ACL table's LPM field is one of its rules' masks) */
    uint8_t lpm_stride1; /* LPM: the bits of the trie's level 1, 16 or 8 (small VRFs: nfc_lpm.h) */
    uint8_t acl;   /* a ternary or range key field: rte_acl classifies (nfc_acl.h); key_bytes: the rule key's */
    uint8_t state; /* data-plane state: written by the forwarding lcore, not the control plane */
    uint8_t inline_values;
    uint8_t tracked; /* cached on the switch: the server's hits are sampled (nfc_hits.h) */
    uint16_t key_bytes;
    uint8_t key_width[NFC_MAX_FIELDS];   /* 1..NFC_MAX_WIDTH bits each */
    uint8_t value_width[NFC_MAX_FIELDS];
    uint8_t match[NFC_MAX_FIELDS];       /* enum nfc_match of each key field */
    /* set by nfc_tables_init: the 64-bit words of the key fields' values, of what follows them
     * in a record's key (an LPM table's prefix length; an ACL table's prefix lengths, masks and
     * high bounds, then its priority) and of the values, as records carry them */
    uint8_t key_words;
    uint8_t arg_words;
    uint8_t value_words;
    uint64_t timeout_ns; /* state: the default idle timeout */
    uint8_t refresh;     /* state: a hit restarts the entry's idle timer (the .nfp's `refresh`) */
    uint8_t holds_ports; /* state: its entries hold alloc_port's ports (the .nfp's `holds_ports`), */
    uint8_t held_key[2]; /* the port of address key field held_key[0] and port key field held_key[1] */
    /* a switch-cached state: the state tables the `refresh` statements of its lookup's hit arm
     * refresh (nfc_state.h, "links"), and where each one's link sits in a record (set by
     * nfc_tables_init, as link_words: the words after the expiry, timeout and port slot) */
    uint8_t nlinks;
    uint8_t link_table[NFC_MAX_LINKS];
    uint16_t link_off[NFC_MAX_LINKS];
    uint16_t link_words;
    /* run time */
    struct rte_hash *h;         /* replaced when the table grows (RCU) */
    uint32_t cap;               /* h's capacity */
    uint32_t no_room;           /* 0, or a capacity that memory could not give h (nfc_tables.c) */
    struct nfc_lpm trie;        /* LPM: the routes as the lookups see them (nfc_lpm.h) */
    volatile uint64_t plens[3]; /* LPM: the prefix lengths 0..128 present (bit per length) */
    uint32_t plen_count[NFC_MAX_WIDTH + 1]; /* LPM: entries per prefix length (control thread only) */
    struct nfc_acl *classifier;             /* ACL: the rules as the lookups see them (RCU) */
    struct nfc_acl_order *acl_order;        /* ACL: the order rules were added in (control thread only) */
    struct rte_hash *pins;                  /* a switch-cached state: the entries pinned (nfc_state.c) */
    /* state, written under the table's writer lock (nfc_state.c): its entries (at most cap; h
     * has room for more, the key slots of removed entries waiting for their grace period), and
     * the sweep of a full table: its cursor, the earliest expiry it has seen in this round, one
     * no unpinned entry expires before (as of the last whole round, lowered by every insert
     * and unpin since), no batch before sweep_after (a batch that found nothing: SWEEP_DUTY),
     * and the entries it removed (the counters' `swept`) */
    uint32_t live;
    uint32_t sweep_next;
    uint64_t sweep_low, next_expiry, sweep_after;
    uint64_t swept;
};

/* Implemented by the generated nf.c */
extern struct nfc_table nfc_tables[];
extern const int nfc_ntables;
extern const char nfc_program[]; /* the NF's name: the control channel's HELLO reports it */
int nfc_from_switch(struct nfc_pkt *p, const uint8_t *data, uint32_t len, uint32_t port);
int nfc_run(struct nfc_pkt *p);
/* Stage `phase` of the packet's cut (NFC_CONTINUE when it has no such stage), and the key of
 * table `table` at that stage's entry (-1: not looked up there): a burst runs stage by stage
 * when nfc_phases > 0 (nfc_burst.h), every packet through a stage before the next, and
 * nfc_prefetch(..., phase) before each.  Then a lookup takes the answer kept at its stage's
 * entry; nfc_run (every stage in turn) drops any kept answer first. */
int nfc_run_phase(struct nfc_pkt *p, int phase);
int nfc_stage_key(int phase, int table, const struct nfc_pkt *p, uint8_t *key);
extern const int nfc_phases;
extern const uint64_t nfc_phase_tables[]; /* per phase, the tables its stages look up (bit i: nfc_tables[i]) */
uint32_t nfc_to_switch(const struct nfc_pkt *p, uint8_t *out, uint32_t cap);
uint32_t nfc_bridge_out(const struct nfc_pkt *p, uint8_t *end, uint32_t room);
const uint8_t *nfc_headers_in_place(const struct nfc_pkt *p);
void nfc_finish_in_place(struct nfc_pkt *p);
const char *nfc_reason(int code);
int nfc_bench_key(int table, const struct nfc_pkt *p, uint8_t *key);
extern const int nfc_nreasons;
extern const int nfc_software;
extern const int nfc_uses_esp; /* the ESP suites the program uses (NFC_ESP_GCM, NFC_ESP_CBC): nfc_esp_init at start */
extern const int nfc_crypto_drop; /* the drop code of crypto_unavailable (0: the program has no ESP) */
extern const int nfc_fixed_layout; /* packets leave with the headers and payload they came with (nfc_output) */
extern const int nfc_register_writes; /* a stage writes a register: the program forwards on one lcore */
extern const uint16_t nfc_inst_bytes[]; /* the bytes of each header instance, in packet order */
extern const int nfc_ninst;

/* The packet's length as it would leave now: its valid headers and its payload (what a
 * counter or meter counts, as the reference's deparsed packet). */
static inline uint32_t nfc_pkt_len(const struct nfc_pkt *p)
{
    uint32_t n = p->payload_len;
    for (int i = 0; i < NFC_MAX_INST; i++)
        n += p->valid[i] ? nfc_inst_bytes[i] : 0u;
    return n;
}

/* Implemented by nfc_tables.c: table set-up and the entry operations every writer uses
 * (entries file, control channel).  Status codes are the control channel's (nfc_control.h). */
int nfc_tables_init(void);
int nfc_table_find(const char *name);
/* The key fields of a table's key bytes as the control channel has them (an LPM table: then
 * its prefix length); how many words. */
int nfc_key_fields(const struct nfc_table *t, const uint8_t *key, uint64_t *out);
int nfc_entry_check(const struct nfc_table *t, const uint64_t *keys, const uint64_t *values, uint8_t *key);
int nfc_entry_add(struct nfc_table *t, const uint64_t *keys, const uint64_t *values, int replace);
/* Room for n entries in all in control-plane table t (the entries file sizes its tables before
 * loading them, so no entry is copied by a growth); 0, or -1: no memory for them (nothing changed). */
int nfc_table_reserve(struct nfc_table *t, uint64_t n);
int nfc_entry_read(const struct nfc_table *t, const uint64_t *keys, uint64_t *values);
int nfc_batch(struct nfc_table *t, int op, const uint64_t *rec, uint32_t n, uint32_t stride, uint32_t *bad);
/* Up to max entries of control-plane table t from rte_hash_iterate position *next (0: the
 * start; advanced) into out, each its keys then its values; how many (fewer than max: the end). */
uint32_t nfc_table_copy(const struct nfc_table *t, uint32_t *next, uint32_t max, uint64_t *out);
/* A copy of a data-plane state table, made asynchronously where its forwarding lcore cannot be
 * writing (nfc_tables.c): started by the control thread, advanced by nfc_state_copy_poll
 * (NFC_COPY_*: *n entries copied, *next the position to resume from, 0: the end) and freed by
 * nfc_state_copy_end, which also withdraws it if it is still under way.  Expired entries are
 * left out. */
enum { NFC_COPY_WAITING = 0, NFC_COPY_DONE = 1, NFC_COPY_BUSY = -1 };
struct nfc_state_copy;
struct nfc_state_copy *nfc_state_copy_start(const struct nfc_table *t, uint32_t next, uint32_t max, uint64_t *out);
int nfc_state_copy_poll(struct nfc_state_copy *r, uint32_t *n, uint32_t *next);
void nfc_state_copy_end(struct nfc_state_copy *r);
/* What copying cost the forwarding lcore (COUNTERS): slices served between bursts, their CPU
 * time in all and the longest (ns). */
struct nfc_copy_stats {
    uint64_t slices, cpu_ns, max_ns;
};
struct nfc_copy_stats nfc_state_copy_stats(void);
void nfc_rcu_online(unsigned lcore);
void nfc_rcu_quiescent(unsigned lcore);
void nfc_rcu_offline(unsigned lcore);
/* Implemented by nfc_values.c: an entry's data word for `values` (NULL: out of memory, unless
 * the values are inline) in a control-plane table (a state's: nfc_state_loaded), its release,
 * and the values it holds. */
void *nfc_data_new(const struct nfc_table *t, const uint64_t *values);
void nfc_data_free(const struct nfc_table *t, void *data);
void nfc_values_of(const struct nfc_table *t, const void *data, uint64_t *values);
/* Implemented by nfc_entries.c */
int nfc_load_entries(const char *path);
/* Implemented by nfc_main.c: the counters of every lcore */
extern struct nfc_stats nfc_stats[];

#include "nfc_state.h" /* data-plane state and port pools, shared by the lcores */
#include "nfc_hits.h"  /* hits of switch-cached tables, sampled for the cache manager */

/* The processed packet p, received in the single-segment mbuf m, as nfc_to_switch writes it;
 * NULL: no room.  m is consumed: sent on as the result, or freed.  The payload is still in
 * m where it arrived, and so are the extracted headers (changed in place), so when m is ours
 * alone: if no header was pushed or removed from between others, only the checksums and the
 * bridge are written (nothing copied); else, when the bridge and headers fit in front of the
 * payload, they are built aside and written there; otherwise a new mbuf from `pool` gets the
 * whole packet (from `jumbo` when it is too big for one of `pool`, if there is a jumbo pool).
 * The packets dropped for want of room are exactly those of that path: nothing to send, more
 * than NFC_MAX_PKT bytes, or more than a new mbuf holds (`room`: nfc_new_room(pool), read once
 * per burst: it lives in the pool's private area, a page of its own).  `out`: scratch of
 * NFC_MAX_PKT bytes.  A program that moves no header (nfc_fixed_layout) sends m as it came,
 * with its checksums written. */
static inline uint16_t nfc_new_room(struct rte_mempool *pool)
{
    uint16_t room = rte_pktmbuf_data_room_size(pool);
    room = (uint16_t)(room - RTE_MIN(room, (uint16_t)RTE_PKTMBUF_HEADROOM)); /* a new mbuf's tailroom */
    return (uint16_t)RTE_MIN(room, NFC_MAX_PKT); /* and no packet is over NFC_MAX_PKT: one compare a packet */
}

static inline struct rte_mbuf *nfc_output(struct rte_mbuf *m, struct nfc_pkt *p, struct rte_mempool *pool,
                                          uint16_t room, struct rte_mempool *jumbo, uint8_t *out)
{
    if (nfc_fixed_layout && RTE_MBUF_DIRECT(m) && rte_mbuf_refcnt_read(m) == 1 && m->data_len > 0) {
        /* the headers were parsed one after the other from the frame's start up to the payload,
         * which is the rest of the frame, and none was pushed, popped or moved since: the frame
         * stays as it is, with the fields the stages wrote in place and the checksums (what the
         * path below does when it finds the headers in place and no bridge, without its checks) */
        nfc_finish_in_place(p);
        return m;
    }
    uint8_t *buf = (uint8_t *)m->buf_addr;
    uint32_t plen = p->payload_len;
    /* the payload's offset in m's buffer: over buf_len when it is elsewhere (ESP's buffer), as
     * the unsigned difference wraps when it is in front */
    uintptr_t pay = (uintptr_t)p->payload - (uintptr_t)buf;
    if (RTE_MBUF_DIRECT(m) && rte_mbuf_refcnt_read(m) == 1 && pay <= m->buf_len && plen <= m->buf_len - pay) {
        const uint8_t *first = nfc_headers_in_place(p);
        if (first != NULL) { /* unmoved headers stay; the checksums and the bridge are written */
            /* the bridge written straight in front of the headers when it fits there (built aside
             * and copied, its 8 + 1 byte stores were read back as one load: a store-forwarding
             * stall); written or not, nothing below reads those bytes */
            uint32_t at = (uint32_t)(first - buf), b = nfc_bridge_out(p, (uint8_t *)(uintptr_t)first, at);
            uint32_t len = b + (uint32_t)(p->payload - first) + plen;
            if (len > 0 && b <= at && len <= room) {
                nfc_finish_in_place(p);
                /* no rte_pktmbuf_reset: m is one direct segment of ours (next, nb_segs and
                 * tx_offload as a fresh mbuf has them); what the receive side set (ol_flags'
                 * RX bits, packet_type, hash) no transmit path reads, as in l3fwd */
                m->data_off = (uint16_t)(at - b);
                m->data_len = (uint16_t)len;
                m->pkt_len = len;
                return m;
            }
        }
        /* the bridge and headers built aside (they may overlap where they go), then written in
         * front of the payload */
        p->payload_len = 0;
        uint32_t n = plen <= NFC_MAX_PKT ? nfc_to_switch(p, out, NFC_MAX_PKT - plen) : 0;
        p->payload_len = plen;
        uint32_t at = (uint32_t)pay;
        if (n > 0 && n <= at && n + plen <= room) {
            rte_pktmbuf_reset(m);
            m->data_off = (uint16_t)(at - n);
            m->data_len = (uint16_t)(n + plen);
            m->pkt_len = n + plen;
            memcpy(buf + at - n, out, n);
            return m;
        }
    }
    uint32_t n = nfc_to_switch(p, out, NFC_MAX_PKT);
    struct rte_mbuf *o = rte_pktmbuf_alloc(n > room && jumbo != NULL ? jumbo : pool);
    char *dst = o != NULL && n > 0 ? rte_pktmbuf_append(o, (uint16_t)n) : NULL;
    if (dst != NULL)
        memcpy(dst, out, n);
    else
        rte_pktmbuf_free(o);
    rte_pktmbuf_free(m);
    return dst != NULL ? o : NULL;
}

/* The lookups of a burst, in bulk: for each control-plane table, the keys the parsed packets
 * (codes[i] == NFC_CONTINUE) have as they arrive (nfc_bench_key; `phase` -1), or at the entry
 * of stage `phase` of their cut (nfc_stage_key: only the tables that stage looks up; the
 * answers kept at the stage before are dropped), go to one bulk lookup
 * (rte_hash_lookup_bulk_data, which overlaps the keys' cache misses, or nfc_lpm_find_bulk)
 * and the answers are kept per packet; nfc_run's lookup of the same key (nfc_exact_lookup,
 * nfc_lpm_lookup) takes the kept answer.  A key an earlier stage changes, or a table a packet
 * never looks up, costs a wasted lookup, never a different result: control-plane tables
 * change only between bursts as far as a packet can tell (RCU).  Data-plane state changes
 * within a burst: its lookups are only prefetched, in bulk, when the table is big.  A hit's
 * values record (a table whose values are not inline) is prefetched too: the stage reads it. */
#define NFC_PREFETCH_MIN 65536
#ifndef NFC_ACL_PER_PACKET
#define NFC_ACL_PER_PACKET 0 /* 1: no classification per burst (bench/bench_acl.py's baseline) */
#endif
#define NFC_PREFETCH_BURST 32 /* the most packets nfc_prefetch takes (a burst: NFC_BURST) */
/* Two keys of NFC_PRE_KEY bytes are equal (inline and unrolled: a libc memcmp call, or a loop
 * over a table's key_bytes, would cost what the lookup it saves does).  A kept key's bytes past
 * its table's key_bytes are never written, so they stay as the static packet arrays start them
 * (zero) and compare equal; were they not, two equal keys would only be looked up twice. */
static inline int nfc_key_eq(const uint8_t *a, const uint8_t *b)
{
    uint64_t diff = 0;
    for (unsigned i = 0; i < NFC_PRE_KEY; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        diff |= x ^ y;
    }
    return diff == 0;
}

/* n <= NFC_PREFETCH_BURST: the burst's packets are looked up in one bulk call per table. */
static inline void nfc_prefetch(struct nfc_pkt *pkts, const int *codes, unsigned n, int phase)
{
    for (unsigned i = 0; phase > 0 && i < n; i++)
        pkts[i].pre_ok = 0;
    n = RTE_MIN(n, (unsigned)NFC_PREFETCH_BURST); /* a packet past it would look its key up alone */
    for (int t = 0; t < nfc_ntables; t++) {
        struct nfc_table *tab = &nfc_tables[t];
        if (phase >= 0 && !((nfc_phase_tables[phase] >> t) & 1))
            continue;
        int keep = t < NFC_PRE_TABLES && !tab->state && tab->key_bytes <= NFC_PRE_KEY;
        if (tab->acl) /* its rule key is the hash's: the lookup key is rte_acl's input, shorter */
            keep = t < NFC_PRE_TABLES && nfc_acl_lookup_bytes(tab) <= NFC_PRE_KEY && !NFC_ACL_PER_PACKET;
        if (tab->h == NULL || (!keep && (tab->acl || tab->lpm >= 0 || rte_hash_count(tab->h) < NFC_PREFETCH_MIN)))
            continue;
        /* a run of packets with one key (an exact table: keyed by the ingress port, say) is
         * looked up once, its first packet's answer kept for the others */
        int runs = keep && !tab->acl && tab->lpm < 0;
        uint8_t keys[NFC_PREFETCH_BURST][NFC_MAX_KEY];
        const void *kp[NFC_PREFETCH_BURST];
        void *data[NFC_PREFETCH_BURST];
        int8_t of[NFC_PREFETCH_BURST]; /* packet i's lookup, kp[of[i]]; -1: it has no key here */
        uint64_t hits = 0;
        unsigned k = 0;
        const uint8_t *last = NULL; /* the key of the packet before, if it has one */
        for (unsigned i = 0; i < n; i++) {
            /* a key whose answer is kept is built where it is kept: no copy (a libc memcpy of
             * key_bytes per packet and table) */
            uint8_t *kb = keep ? pkts[i].pre_key[t] : keys[k];
            int has = codes[i] == NFC_CONTINUE &&
                      (phase < 0 ? nfc_bench_key(t, &pkts[i], kb) : nfc_stage_key(phase, t, &pkts[i], kb)) == 0;
            if (!has) {
                of[i] = -1;
                last = NULL;
            } else if (runs && last != NULL && nfc_key_eq(kb, last)) {
                of[i] = (int8_t)(k - 1);
            } else {
                of[i] = (int8_t)k;
                kp[k++] = last = kb;
            }
        }
        if (k == 0)
            continue;
        if (tab->acl) /* one rte_acl_classify for the burst's keys */
            nfc_acl_find_bulk(&tab->classifier, (const uint8_t *const *)kp, k, data, &hits);
        else if (tab->lpm >= 0)
            nfc_lpm_find_bulk(&tab->trie, (const uint8_t *const *)kp, k, data, &hits);
        else if (rte_hash_lookup_bulk_data(tab->h, kp, k, &hits, data) < 0)
            continue;
        for (unsigned j = 0; !tab->inline_values && j < k; j++)
            if ((hits >> j) & 1) /* the values record the stage reads (a miss of its own) */
                rte_prefetch0(data[j]);
        /* each packet's answer read from the bulk call's arrays (reading back what the packet
         * before was just given waited on store forwarding at every packet) */
        for (unsigned i = 0; keep && i < n; i++)
            if (of[i] >= 0) {
                pkts[i].pre_hit[t] = (uint8_t)((hits >> of[i]) & 1);
                pkts[i].pre_data[t] = data[of[i]];
                pkts[i].pre_ok |= 1u << t;
            }
    }
}

/* The burst's answer for control-plane table t and key, if nfc_prefetch kept one:
 * 1 found, 0 missed, -1 no answer kept. */
static inline int nfc_kept(const struct nfc_pkt *p, int t, const uint8_t *key, unsigned key_bytes, void **data)
{
    if (t < NFC_PRE_TABLES && ((p->pre_ok >> t) & 1) && memcmp(p->pre_key[t], key, key_bytes) == 0) {
        *data = p->pre_data[t];
        return p->pre_hit[t];
    }
    return -1;
}

/* The burst's answer for control-plane table t, if nfc_prefetch kept one, where the generated
 * code knows the key is the one nfc_prefetch took (nothing the key reads was written since the
 * packet arrived): 1 found, 0 missed, -1 no answer kept.  No key is built or compared. */
static inline int nfc_kept_answer(const struct nfc_pkt *p, int t, void **data)
{
    if ((p->pre_ok >> t) & 1) {
        *data = p->pre_data[t];
        return p->pre_hit[t];
    }
    return -1;
}

/* Exact-match lookup of control-plane table t in its rte_hash; 1: found. */
static inline int nfc_exact_find(int t, const uint8_t *key, void **data)
{
    return rte_hash_lookup_data(nfc_tables[t].h, key, data) >= 0;
}

/* Exact-match lookup of control-plane table t; 1: found. */
static inline int nfc_exact_lookup(const struct nfc_pkt *p, int t, const uint8_t *key, unsigned key_bytes,
                                   void **data)
{
    int kept = nfc_kept(p, t, key, key_bytes, data);
    return kept >= 0 ? kept : nfc_exact_find(t, key, data);
}

/* Lookup of a ternary / range table t (the key: rte_acl's input, nfc_acl.h); 1: found. */
static inline int nfc_acl_lookup(const struct nfc_pkt *p, int t, const uint8_t *key, unsigned key_bytes, void **data)
{
    int kept = nfc_kept(p, t, key, key_bytes, data);
    return kept >= 0 ? kept : nfc_acl_find(&nfc_tables[t].classifier, key, data);
}

/* Longest-prefix-match lookup of table t (the LPM field whole in the key); 1: found. */
static inline int nfc_lpm_lookup(const struct nfc_pkt *p, int t, const uint8_t *key, unsigned key_bytes,
                                 void **data)
{
    int kept = nfc_kept(p, t, key, key_bytes, data);
    return kept >= 0 ? kept : nfc_lpm_find(&nfc_tables[t].trie, key, data);
}

#endif
