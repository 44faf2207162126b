/* nfc server runtime: longest-prefix match as a multibit trie (issue 13), the layout of seed
 * 004 §4.1.2 ("Fast datapath route lookup"): DPDK's DIR-24-8 with its 2^24-entry first stage
 * cut into a directory of 2^8 entries and sub-tables of 2^16 allocated on demand, then
 * tables of 2^8 per further 8 bits, also on demand.  A VRF (the table's exact key fields)
 * costs its 2 KiB directory until it has a route longer than /8.  A trie whose VRFs are
 * expected to be small (`stride1` 8, chosen by the generator: the table's size over its VRFs
 * is under 2^16 routes each) has 2^8 entries at level 1 too: a VRF's /8 with a longer route
 * costs 2 KiB instead of 512 KiB, for one more load to reach a /17-/24 route.
 *
 * The LPM field is left-aligned to NFC_LPM_BITS(w) bits (32, 64 or 128: IPv6); level 0
 * indexes its top 8 bits, level 1 the next stride1 (16 or 8), every further level 8.  An
 * entry is one 64-bit word:
 *
 *   bit 63      NFC_LPM_EXT: the low 55 bits point at the next level's table
 *   bits 62..56 the prefix length + 1 of the route the entry expands (0: no route); in a
 *               128-bit trie bits 62..55 (a /128 is 129)
 *   bits 55..0  that route's data word (rte_hash's data: the inline values or a pointer);
 *               in a 128-bit trie bits 54..0
 *
 * Readers (forwarding lcores) take no lock: the one writer (nfc_lpm.c, the control thread)
 * fills a new table before it publishes the pointer, stores whole words, and frees what it
 * unlinks only after every lcore has passed a quiescent state (nfc_lpm_reclaim).
 * Included by nfc_rt.h (after its bit-field accessors).  Hand-written, shared by every
 * generated program. */
#ifndef NFC_LPM_H
#define NFC_LPM_H

#include <stdint.h>
#include <string.h>

#include <rte_hash.h>
#include <rte_prefetch.h>

#define NFC_LPM_EXT (1ull << 63)
#define NFC_LPM_DATA ((1ull << 55) - 1) /* a table's address in an NFC_LPM_EXT entry */
#define NFC_LPM_DEPTH_SHIFT(bits) ((bits) > 64 ? 55u : 56u)
#define NFC_LPM_BITS(w) ((w) <= 32 ? 32u : (w) <= 64 ? 64u : 128u)
_Static_assert(NFC_INLINE_LPM_BITS <= NFC_LPM_DEPTH_SHIFT(32) && NFC_INLINE_LPM6_BITS <= NFC_LPM_DEPTH_SHIFT(128),
               "the server profile's [memory] inline_lpm_value_bits / inline_lpm6_value_bits: a trie's word keeps 56 / 55");
#define NFC_LPM_DIRECT_BITS 20 /* VRF fields of up to this many bits index an array of roots */

struct nfc_lpm_root {
    uint64_t dir[256];
};

struct nfc_lpm {
    unsigned w;        /* width of the LPM field */
    unsigned bits;     /* NFC_LPM_BITS(w) */
    uint64_t data;     /* the mask of an entry's data word: below NFC_LPM_DEPTH_SHIFT(bits) */
    unsigned off;      /* bit offset of the LPM field in the key */
    unsigned len_off;  /* bit offset of the prefix-length byte in a rule's key */
    unsigned key_bytes;
    unsigned stride1;  /* the bits level 1 indexes: 16 (DIR-24-8's first stage, cut), or 8 */
    /* the key's other (exact) fields name the VRF: of at most NFC_LPM_DIRECT_BITS bits, its
     * root is direct[their value]; wider, vrfs maps them (the VRF key) to it; none: one root */
    struct nfc_lpm_root **direct;
    struct rte_hash *vrfs;
    struct nfc_lpm_root *one; /* no exact fields: the one root */
    /* control thread only */
    uint64_t bytes;           /* memory of the trie: roots and tables */
    uint64_t tables[2];       /* tables of 2^8 entries (roots too) and of 2^16 in use (nfc_lpm.c) */
};

/* The entry of address a (left-aligned to l->bits) under root r: 0, or a route's word. */
static inline uint64_t nfc_lpm_walk(const struct nfc_lpm *l, const struct nfc_lpm_root *r, uint64_t a)
{
    const unsigned bits = l->bits, s1 = l->stride1;
    uint64_t e = __atomic_load_n(&r->dir[a >> (bits - 8)], __ATOMIC_ACQUIRE);
    if (!(e & NFC_LPM_EXT))
        return e;
    const uint64_t *sub = (const uint64_t *)(uintptr_t)(e & NFC_LPM_DATA);
    e = __atomic_load_n(&sub[(a >> (bits - 8 - s1)) & ((1u << s1) - 1)], __ATOMIC_ACQUIRE);
    for (unsigned sh = bits - 8 - s1; (e & NFC_LPM_EXT) && sh >= 8;) {
        sh -= 8;
        const uint64_t *t8 = (const uint64_t *)(uintptr_t)(e & NFC_LPM_DATA);
        e = __atomic_load_n(&t8[(a >> sh) & 0xff], __ATOMIC_ACQUIRE);
    }
    return e;
}

/* The entry of a 128-bit address a under root r (an IPv6 trie): nfc_lpm_walk's levels. */
static inline uint64_t nfc_lpm_walk_wide(const struct nfc_lpm *l, const struct nfc_lpm_root *r, nfc_u128 a)
{
    const unsigned s1 = l->stride1;
    uint64_t e = __atomic_load_n(&r->dir[(uint64_t)(a >> 120)], __ATOMIC_ACQUIRE);
    if (!(e & NFC_LPM_EXT))
        return e;
    const uint64_t *sub = (const uint64_t *)(uintptr_t)(e & NFC_LPM_DATA);
    e = __atomic_load_n(&sub[(uint64_t)(a >> (120 - s1)) & ((1u << s1) - 1)], __ATOMIC_ACQUIRE);
    for (unsigned sh = 120 - s1; (e & NFC_LPM_EXT) && sh >= 8;) {
        sh -= 8;
        const uint64_t *t8 = (const uint64_t *)(uintptr_t)(e & NFC_LPM_DATA);
        e = __atomic_load_n(&t8[(uint64_t)(a >> sh) & 0xff], __ATOMIC_ACQUIRE);
    }
    return e;
}

/* Whether the LPM field is IPv4 at a byte boundary: one 32-bit load. */
static inline int nfc_lpm_v4(const struct nfc_lpm *l)
{
    return l->w == 32 && (l->off & 7) == 0;
}

/* The LPM field of a packed key (nfc_rt.h's layout), left-aligned to l->bits (<= 64), when
 * !nfc_lpm_v4(l). */
static inline uint64_t nfc_lpm_addr_bits(const struct nfc_lpm *l, const uint8_t *key)
{
    return nfc_get(key, l->off, l->w) << (l->bits - l->w);
}

/* The LPM field of a packed key, left-aligned to l->bits (<= 64). */
static inline uint64_t nfc_lpm_addr(const struct nfc_lpm *l, const uint8_t *key)
{
    return nfc_lpm_v4(l) ? nfc_get32(key + (l->off >> 3)) : nfc_lpm_addr_bits(l, key);
}

/* The LPM field left-aligned to l->bits, whatever they are. */
static inline nfc_u128 nfc_lpm_addrw(const struct nfc_lpm *l, const uint8_t *key)
{
    return l->bits <= 64 ? (nfc_u128)nfc_lpm_addr(l, key) : nfc_getw(key, l->off, l->w) << (128 - l->w);
}

/* The root of a packed lookup key's VRF (its exact fields), NULL: no route in that VRF. */
static inline const struct nfc_lpm_root *nfc_lpm_root_of(const struct nfc_lpm *l, const uint8_t *key);

/* Lookup of a packed key (fields as the table has them, the LPM field whole); 1 and *data:
 * the longest matching route's data word. */
static inline int nfc_lpm_find(const struct nfc_lpm *l, const uint8_t *key, void **data)
{
    const struct nfc_lpm_root *r = nfc_lpm_root_of(l, key);
    uint64_t e = r == NULL            ? 0
                 : l->bits > 64 ? nfc_lpm_walk_wide(l, r, nfc_lpm_addrw(l, key))
                                : nfc_lpm_walk(l, r, nfc_lpm_addr(l, key));
    *data = (void *)(uintptr_t)(e & l->data);
    return e != 0;
}

/* The VRF key of a packed key: the same bytes with the LPM field and the prefix-length byte
 * (a rule's key has its length there; a lookup key has zero) zeroed. */
static inline void nfc_lpm_vrf_key(const struct nfc_lpm *l, const uint8_t *key, uint8_t *out)
{
    memcpy(out, key, l->key_bytes);
    nfc_setw(out, l->off, l->w, 0);
    nfc_set(out, l->len_off, 8, 0);
}

/* The value of a packed key's VRF fields (those before and after the LPM field). */
static inline uint64_t nfc_lpm_vrf_index(const struct nfc_lpm *l, const uint8_t *key)
{
    unsigned after = l->len_off - l->off - l->w;
    uint64_t hi = l->off ? nfc_get(key, 0, l->off) : 0, lo = after ? nfc_get(key, l->off + l->w, after) : 0;
    return hi << after | lo;
}

static inline const struct nfc_lpm_root *nfc_lpm_root_of(const struct nfc_lpm *l, const uint8_t *key)
{
    if (l->direct != NULL)
        return __atomic_load_n(&l->direct[nfc_lpm_vrf_index(l, key)], __ATOMIC_ACQUIRE);
    if (l->vrfs == NULL)
        return __atomic_load_n(&l->one, __ATOMIC_ACQUIRE);
    uint8_t vk[NFC_MAX_KEY];
    void *root = NULL;
    nfc_lpm_vrf_key(l, key, vk);
    return rte_hash_lookup_data(l->vrfs, vk, &root) >= 0 ? (const struct nfc_lpm_root *)root : NULL;
}

/* Lookups of n packed keys at once (n <= 64): found (bit i of *hits) and data[i].  The
 * VRFs first (an array load each, or one bulk hash lookup), then the levels of all keys in
 * step: the level-1 loads of the burst are independent, so their misses overlap (a prefetch
 * one loop earlier was no faster in a scratch measurement on bench/l3fwd.nfp: the loop is
 * too short to hide a miss), and the level-2 entries (rare with a 16-bit level 1: routes over
 * /24; with an 8-bit one every /17-/24 route) are prefetched a loop ahead; deeper levels are
 * walked one key after the other. */
static inline void nfc_lpm_find_bulk(const struct nfc_lpm *l, const uint8_t *const *keys, unsigned n,
                                     void **data, uint64_t *hits)
{
    const struct nfc_lpm_root *root[64];
    uint64_t a[64], e[64];
    if (l->bits > 64) { /* IPv6: one after the other */
        uint64_t h = 0;
        for (unsigned i = 0; i < n; i++)
            h |= (uint64_t)nfc_lpm_find(l, keys[i], &data[i]) << i;
        *hits = h;
        return;
    }
    /* the addresses, the key's format tested once for the burst (not per key in nfc_lpm_addr) */
    if (nfc_lpm_v4(l)) {
        const unsigned at = l->off >> 3;
        for (unsigned i = 0; i < n; i++)
            a[i] = nfc_get32(keys[i] + at);
    } else {
        for (unsigned i = 0; i < n; i++)
            a[i] = nfc_lpm_addr_bits(l, keys[i]);
    }
    const unsigned bits = l->bits, end1 = 8 + l->stride1; /* level 1 ends at bit end1 */
    const uint64_t mask1 = (1ull << l->stride1) - 1;
    if (l->direct == NULL && l->vrfs == NULL) { /* level 0 under the one root (a directory stays in cache) */
        const struct nfc_lpm_root *one = __atomic_load_n(&l->one, __ATOMIC_ACQUIRE);
        if (one == NULL) { /* no route yet: every key misses */
            for (unsigned i = 0; i < n; i++)
                data[i] = NULL;
            *hits = 0;
            return;
        }
        for (unsigned i = 0; i < n; i++)
            e[i] = __atomic_load_n(&one->dir[a[i] >> (bits - 8)], __ATOMIC_ACQUIRE);
    } else { /* each key's VRF, then level 0 under its root */
        if (l->direct != NULL) {
            for (unsigned i = 0; i < n; i++)
                root[i] = __atomic_load_n(&l->direct[nfc_lpm_vrf_index(l, keys[i])], __ATOMIC_ACQUIRE);
        } else {
            uint8_t vk[64][NFC_MAX_KEY];
            const void *vkp[64];
            for (unsigned i = 0; i < n; i++) {
                nfc_lpm_vrf_key(l, keys[i], vk[i]);
                vkp[i] = vk[i];
            }
            uint64_t found = 0;
            if (rte_hash_lookup_bulk_data(l->vrfs, vkp, n, &found, (void **)root) < 0)
                found = 0;
            for (unsigned i = 0; i < n; i++)
                if (!((found >> i) & 1))
                    root[i] = NULL;
        }
        for (unsigned i = 0; i < n; i++)
            e[i] = root[i] == NULL ? 0 : __atomic_load_n(&root[i]->dir[a[i] >> (bits - 8)], __ATOMIC_ACQUIRE);
    }
    for (unsigned i = 0; i < n; i++) { /* level 1, then prefetch the level-2 entry */
        if (!(e[i] & NFC_LPM_EXT))
            continue;
        const uint64_t *sub = (const uint64_t *)(uintptr_t)(e[i] & NFC_LPM_DATA);
        e[i] = __atomic_load_n(&sub[(a[i] >> (bits - end1)) & mask1], __ATOMIC_ACQUIRE);
        if (e[i] & NFC_LPM_EXT)
            rte_prefetch0((const uint64_t *)(uintptr_t)(e[i] & NFC_LPM_DATA) + ((a[i] >> (bits - end1 - 8)) & 0xff));
    }
    uint64_t h = 0;
    for (unsigned i = 0; i < n; i++) { /* the deeper levels, one after the other */
        for (unsigned sh = bits - end1; (e[i] & NFC_LPM_EXT) && sh >= 8;) {
            sh -= 8;
            const uint64_t *t8 = (const uint64_t *)(uintptr_t)(e[i] & NFC_LPM_DATA);
            e[i] = __atomic_load_n(&t8[(a[i] >> sh) & 0xff], __ATOMIC_ACQUIRE);
        }
        data[i] = (void *)(uintptr_t)(e[i] & l->data);
        h |= (uint64_t)(e[i] != 0) << i;
    }
    *hits = h;
}

/* The writer's side (nfc_lpm.c).  `key` is a rule's key as rte_hash holds it: the LPM field
 * masked to the prefix length, the length in the byte at len_off. */
struct nfc_table;
/* `name`: of the VRFs' rte_hash (unique in the process); `stride1`: level 1's bits, 16 or 8 */
int nfc_lpm_init(struct nfc_lpm *l, unsigned w, unsigned off, unsigned len_off, unsigned key_bytes, int vrfs,
                 unsigned stride1, const char *name);
/* The trie's memory in bytes: its tables and roots, and the VRFs' array (control thread). */
uint64_t nfc_lpm_bytes(const struct nfc_lpm *l);
/* Route `key` now answers `data`; `fresh`: a new route (else it replaces its own data).
 * 0, or -ENOMEM with nothing changed. */
int nfc_lpm_set(struct nfc_lpm *l, const uint8_t *key, void *data, int fresh);
/* Route `key` is gone (already out of `rules`, where the route that covers it now is found). */
void nfc_lpm_unset(struct nfc_lpm *l, const uint8_t *key, struct rte_hash *rules, const volatile uint64_t *plens);
/* Free what unset unlinked; call only after a grace period begun after those calls. */
void nfc_lpm_reclaim(void);

#endif
