/* nfc server runtime: the writer's side of the LPM trie (nfc_lpm.h has the layout and the
 * lookups).  One writer, the control thread (or the entries file before forwarding starts).
 *
 * Adding route P/d: the tables on P's path down to the level whose bits end at or after d
 * are made if missing (each filled with the entry it replaces, so publishing it changes no
 * answer), then the 2^(end - d) entries P/d covers at that level, and every entry of the
 * tables below them, take the route unless a longer route holds them.  Removing it gives
 * the entries it held to the longest route that covers P/d (found in the rules, the
 * table's rte_hash) or empties them.  Every table counts the routes inside it (longer than
 * the bits above it); a table whose count drops to 0 holds one entry repeated, so its
 * parent's entry takes that entry and the table is freed after a grace period, as is a VRF
 * without routes.  Tables come from 64 MiB regions advised as transparent huge pages (the
 * lookups' TLB misses) and are reused; memory is never given back to the system.
 * Hand-written, shared by every generated program. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <rte_hash.h>

#include "nfc_rt.h"

/* A table: a 64-byte header (the routes inside; the free list's link), then its entries. */
struct level {
    uint64_t inner;
    struct level *next_free;
    uint64_t pad[6];
    uint64_t e[];
};

enum { SMALL, BIG }; /* 2^8 entries (roots too), 2^16 entries */
static const size_t CLASS_BYTES[2] = {sizeof(struct level) + 256 * 8, sizeof(struct level) + 65536 * 8};
#define REGION (64ull << 20)

static struct level *free_list[2];
static uint8_t *region, *region_end;

static struct level *level_new(struct nfc_lpm *l, int cls, uint64_t fill)
{
    struct level *t = free_list[cls];
    if (t != NULL) {
        free_list[cls] = t->next_free;
    } else {
        if (region == NULL || (size_t)(region_end - region) < CLASS_BYTES[cls]) {
            void *m = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED)
                return NULL;
            madvise(m, REGION, MADV_HUGEPAGE); /* advice: without it, 4 KiB pages */
            region = m;
            region_end = region + REGION;
        }
        t = (struct level *)region;
        region += CLASS_BYTES[cls];
    }
    t->inner = 0;
    t->next_free = NULL;
    size_t n = cls == BIG ? 65536 : 256;
    for (size_t i = 0; i < n; i++)
        t->e[i] = fill;
    l->bytes += CLASS_BYTES[cls];
    l->tables[cls]++;
    return t;
}

/* ---- what waits for the grace period ----------------------------------------------------- */

struct unlinked {
    struct level *t;
    int cls;
    struct rte_hash *h; /* or a VRF's key position in h */
    int32_t pos;
};
static struct unlinked *pending;
static size_t npending, cap_pending;

static void defer(struct unlinked u)
{
    if (npending == cap_pending) {
        size_t cap = cap_pending ? 2 * cap_pending : 64;
        struct unlinked *p = realloc(pending, cap * sizeof *p);
        if (p == NULL)
            return; /* out of memory: the table stays allocated, never reused */
        pending = p;
        cap_pending = cap;
    }
    pending[npending++] = u;
}

void nfc_lpm_reclaim(void)
{
    for (size_t i = 0; i < npending; i++) {
        struct unlinked *u = &pending[i];
        if (u->t != NULL) {
            u->t->next_free = free_list[u->cls];
            free_list[u->cls] = u->t;
        } else {
            rte_hash_free_key_with_position(u->h, u->pos);
        }
    }
    npending = 0;
}

/* ---- levels ------------------------------------------------------------------------------ */

static unsigned end_bit(const struct nfc_lpm *l, unsigned k)
{
    return k == 0 ? 8 : 8 + l->stride1 + 8 * (k - 1); /* 8, 24, 32, 40, ... (stride1 8: 8, 16, 24, ...) */
}

static int cls_of(const struct nfc_lpm *l, unsigned k)
{
    return k == 1 && l->stride1 == 16 ? BIG : SMALL;
}

static uint64_t slots(const struct nfc_lpm *l, unsigned k)
{
    return cls_of(l, k) == BIG ? 65536 : 256;
}

/* a: the LPM field left-aligned to l->bits (nfc_lpm_addrw) */
static uint64_t index_at(const struct nfc_lpm *l, nfc_u128 a, unsigned k)
{
    return (uint64_t)(a >> (l->bits - end_bit(l, k))) & (slots(l, k) - 1);
}

/* A route's entry: its length d and data word. */
static uint64_t route_word(const struct nfc_lpm *l, int d, const void *data)
{
    return ((uint64_t)(d + 1) << NFC_LPM_DEPTH_SHIFT(l->bits)) | ((uint64_t)(uintptr_t)data & l->data);
}

static struct level *child(uint64_t e)
{
    return (struct level *)((uint8_t *)(uintptr_t)(e & NFC_LPM_DATA) - sizeof(struct level));
}

static uint64_t ext(const struct level *t)
{
    return NFC_LPM_EXT | (uint64_t)(uintptr_t)t->e;
}

static int depth(const struct nfc_lpm *l, uint64_t e)
{
    return (int)((e & ~NFC_LPM_EXT) >> NFC_LPM_DEPTH_SHIFT(l->bits)) - 1; /* -1: no route */
}

static void store(uint64_t *slot, uint64_t e)
{
    __atomic_store_n(slot, e, __ATOMIC_RELEASE);
}

/* Entry s of table t (level k) and everything below it: a route's word `ne` of length d
 * where set (no route, or a route no longer than d), or where unset (the route of length d). */
static void write_under(const struct nfc_lpm *l, struct level *t, unsigned k, uint64_t s, uint64_t ne, int d,
                        int unset)
{
    uint64_t e = t->e[s];
    if (e & NFC_LPM_EXT) {
        struct level *c = child(e);
        for (uint64_t j = 0; j < slots(l, k + 1); j++)
            write_under(l, c, k + 1, j, ne, d, unset);
    } else if (unset ? depth(l, e) == d : depth(l, e) <= d) {
        store(&t->e[s], ne);
    }
}

static void free_under(struct nfc_lpm *l, struct level *t, unsigned k)
{
    for (uint64_t j = 0; j < slots(l, k); j++)
        if (t->e[j] & NFC_LPM_EXT)
            free_under(l, child(t->e[j]), k + 1);
    l->bytes -= CLASS_BYTES[cls_of(l, k)];
    l->tables[cls_of(l, k)]--;
    defer((struct unlinked){.t = t, .cls = cls_of(l, k)});
}

/* ---- routes ------------------------------------------------------------------------------ */

uint64_t nfc_lpm_bytes(const struct nfc_lpm *l)
{
    return l->bytes + (l->direct != NULL ? ((uint64_t)1 << (l->len_off - l->w)) * sizeof *l->direct : 0);
}

int nfc_lpm_init(struct nfc_lpm *l, unsigned w, unsigned off, unsigned len_off, unsigned key_bytes, int vrfs,
                 unsigned stride1, const char *name)
{
    memset(l, 0, sizeof *l);
    l->stride1 = stride1 == 8 ? 8 : 16;
    l->w = w;
    l->bits = NFC_LPM_BITS(w);
    l->data = (1ull << NFC_LPM_DEPTH_SHIFT(l->bits)) - 1;
    l->off = off;
    l->len_off = len_off;
    l->key_bytes = key_bytes;
    if (!vrfs)
        return 0;
    if (len_off - w <= NFC_LPM_DIRECT_BITS) {
        l->direct = calloc((size_t)1 << (len_off - w), sizeof *l->direct);
        return l->direct == NULL ? -ENOMEM : 0;
    }
    l->vrfs = nfc_hash_new(name, 1u << 16, key_bytes,
                           RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF | RTE_HASH_EXTRA_FLAGS_EXT_TABLE);
    return l->vrfs == NULL ? -ENOMEM : 0;
}

static unsigned plen_of(const struct nfc_lpm *l, const uint8_t *key)
{
    return (unsigned)nfc_get(key, l->len_off, 8);
}

/* The root of key's VRF, made if `make` and missing; NULL: none (or no memory). */
static struct level *root_for(struct nfc_lpm *l, const uint8_t *key, int make)
{
    struct nfc_lpm_root *r = NULL;
    uint8_t vk[NFC_MAX_KEY];
    if (l->direct != NULL) {
        r = l->direct[nfc_lpm_vrf_index(l, key)];
    } else if (l->vrfs == NULL) {
        r = l->one;
    } else {
        nfc_lpm_vrf_key(l, key, vk);
        void *d = NULL;
        if (rte_hash_lookup_data(l->vrfs, vk, &d) >= 0)
            r = d;
    }
    if (r != NULL || !make)
        return r == NULL ? NULL : (struct level *)((uint8_t *)r - sizeof(struct level));
    struct level *t = level_new(l, SMALL, 0);
    if (t == NULL)
        return NULL;
    r = (struct nfc_lpm_root *)t->e;
    if (l->direct != NULL) {
        __atomic_store_n(&l->direct[nfc_lpm_vrf_index(l, key)], r, __ATOMIC_RELEASE);
    } else if (l->vrfs == NULL) {
        __atomic_store_n(&l->one, r, __ATOMIC_RELEASE);
    } else if (rte_hash_add_key_data(l->vrfs, vk, r) < 0) {
        t->next_free = free_list[SMALL]; /* never visible */
        free_list[SMALL] = t;
        l->bytes -= CLASS_BYTES[SMALL];
        l->tables[SMALL]--;
        return NULL;
    }
    return t;
}

/* A VRF without routes goes (its root is freed after the grace period); the one root of a
 * trie without VRFs stays. */
static void drop_vrf(struct nfc_lpm *l, const uint8_t *key, struct level *root)
{
    if (l->direct != NULL) {
        __atomic_store_n(&l->direct[nfc_lpm_vrf_index(l, key)], NULL, __ATOMIC_RELEASE);
        free_under(l, root, 0);
        return;
    }
    if (l->vrfs == NULL)
        return;
    uint8_t vk[NFC_MAX_KEY];
    nfc_lpm_vrf_key(l, key, vk);
    int32_t pos = rte_hash_del_key(l->vrfs, vk);
    if (pos >= 0)
        defer((struct unlinked){.h = l->vrfs, .pos = pos});
    free_under(l, root, 0);
}

int nfc_lpm_set(struct nfc_lpm *l, const uint8_t *key, void *data, int fresh)
{
    int d = (int)plen_of(l, key);
    nfc_u128 a = nfc_lpm_addrw(l, key);
    uint64_t ne = route_word(l, d, data);
    struct level *root = root_for(l, key, 1);
    if (root == NULL)
        return -ENOMEM;
    /* 1. the tables missing on the path, made and linked below the first one, then published */
    struct level *path[16] = {root}; /* 128 bits: levels 0..14 (0..15 with stride1 8) */
    unsigned k = 0;
    while ((unsigned)d > end_bit(l, k) && (path[k]->e[index_at(l, a, k)] & NFC_LPM_EXT)) {
        path[k + 1] = child(path[k]->e[index_at(l, a, k)]);
        k++;
    }
    unsigned made = k;
    uint64_t fill = path[k]->e[index_at(l, a, k)];
    while ((unsigned)d > end_bit(l, made)) {
        path[made + 1] = level_new(l, cls_of(l, made + 1), fill);
        if (path[made + 1] == NULL) {
            for (unsigned j = k + 1; j <= made; j++) { /* never visible */
                l->bytes -= CLASS_BYTES[cls_of(l, j)];
                l->tables[cls_of(l, j)]--;
                path[j]->next_free = free_list[cls_of(l, j)];
                free_list[cls_of(l, j)] = path[j];
            }
            if (root->inner == 0)
                drop_vrf(l, key, root); /* made for this route alone */
            return -ENOMEM;
        }
        made++;
    }
    for (unsigned j = made; j > k; j--)
        store(&path[j - 1]->e[index_at(l, a, j - 1)], ext(path[j]));
    /* 2. the count of routes inside every table on the path */
    for (unsigned j = 0; fresh && j <= made; j++)
        path[j]->inner++;
    /* 3. the entries P/d covers at the last level */
    uint64_t first = index_at(l, a, made), n = 1ull << (end_bit(l, made) - (unsigned)d);
    for (uint64_t s = first; s < first + n; s++)
        write_under(l, path[made], made, s, ne, d, 0);
    return 0;
}

/* The word of the longest route in `rules` that covers key's prefix and is shorter; 0: none. */
static uint64_t cover(const struct nfc_lpm *l, const uint8_t *key, struct rte_hash *rules,
                      const volatile uint64_t *plens)
{
    uint8_t k2[NFC_MAX_KEY];
    memcpy(k2, key, l->key_bytes);
    nfc_u128 v = nfc_getw(key, l->off, l->w);
    for (int dd = (int)plen_of(l, key) - 1; rules != NULL && dd >= 0; dd--) {
        if (!((plens[dd >> 6] >> (dd & 63)) & 1))
            continue;
        nfc_u128 keep = dd == 0 ? 0 : ~nfc_maskw(l->w - (unsigned)dd);
        nfc_setw(k2, l->off, l->w, v & keep & nfc_maskw(l->w));
        nfc_set(k2, l->len_off, 8, (uint64_t)dd);
        void *data = NULL;
        if (rte_hash_lookup_data(rules, k2, &data) >= 0)
            return route_word(l, dd, data);
    }
    return 0;
}

void nfc_lpm_unset(struct nfc_lpm *l, const uint8_t *key, struct rte_hash *rules, const volatile uint64_t *plens)
{
    int d = (int)plen_of(l, key);
    nfc_u128 a = nfc_lpm_addrw(l, key);
    struct level *root = root_for(l, key, 0);
    if (root == NULL)
        return;
    struct level *path[16] = {root}; /* 128 bits: levels 0..14 (0..15 with stride1 8) */
    unsigned k = 0;
    while ((unsigned)d > end_bit(l, k)) {
        uint64_t e = path[k]->e[index_at(l, a, k)];
        if (!(e & NFC_LPM_EXT))
            return; /* not a route of this trie */
        path[k + 1] = child(e);
        k++;
    }
    uint64_t ne = cover(l, key, rules, plens), first = index_at(l, a, k), n = 1ull << (end_bit(l, k) - (unsigned)d);
    for (uint64_t s = first; s < first + n; s++)
        write_under(l, path[k], k, s, ne, d, 1);
    for (unsigned j = 0; j <= k; j++)
        path[j]->inner--;
    /* the shallowest table on the path with no route inside goes; its parent takes its entry */
    for (unsigned j = 1; j <= k; j++) {
        if (path[j]->inner != 0)
            continue;
        uint64_t e = path[j]->e[0];
        while (e & NFC_LPM_EXT)
            e = child(e)->e[0];
        store(&path[j - 1]->e[index_at(l, a, j - 1)], e);
        free_under(l, path[j], j);
        break;
    }
    if (root->inner == 0)
        drop_vrf(l, key, root);
}
