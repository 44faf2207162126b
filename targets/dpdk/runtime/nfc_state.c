/* nfc server runtime: the writers' side of data-plane state shared by every forwarding lcore
 * (nfc_state.h has the layout and the lookups): inserts and removals under each table's
 * spinlock, what they replace retired per lcore until a grace period has passed, and the
 * CGN's port pools.  Hand-written, shared by every generated program. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <rte_hash.h>
#include <rte_lcore.h>
#include <rte_rcu_qsbr.h>
#include <rte_spinlock.h>

#include "nfc_rt.h"

extern struct rte_rcu_qsbr *nfc_rcu; /* nfc_tables.c: every forwarding lcore reports to it */

static rte_spinlock_t writer[NFC_MAX_TABLES]; /* each table's writers, one at a time (zero: unlocked) */

/* ---- what waits for the grace period: per lcore, in the order retired ---------------------- */

struct retired {
    uint64_t token; /* rte_rcu_qsbr_start after it was unlinked */
    struct nfc_table *t;
    void *rec;   /* a record to free, or NULL */
    int32_t pos; /* a key slot of t->h to free, or < 0 */
};

struct retire_list {
    struct retired *r;
    size_t head, n, cap; /* r[head..n) wait */
} __attribute__((aligned(64)));

static struct retire_list retired[RTE_MAX_LCORE];

static void release(struct retired *e)
{
    if (e->pos >= 0) { /* a writer's call on t->h: under its lock */
        rte_spinlock_t *lock = &writer[e->t - nfc_tables];
        rte_spinlock_lock(lock);
        rte_hash_free_key_with_position(e->t->h, e->pos);
        rte_spinlock_unlock(lock);
    }
    free(e->rec);
}

/* Retire (t, rec, pos) on the calling lcore; without room to remember it, it waits for the
 * grace period here (only when memory has run out; an lcore outside the RCU set, such as the
 * benchmark's, waits for the others only). */
static void retire(struct nfc_table *t, void *rec, int32_t pos)
{
    unsigned lcore = rte_lcore_id();
    struct retired e = {rte_rcu_qsbr_start(nfc_rcu), t, rec, pos};
    struct retire_list *l = lcore < RTE_MAX_LCORE ? &retired[lcore] : NULL;
    if (l != NULL && l->n == l->cap && l->head > 0) { /* compact */
        memmove(l->r, l->r + l->head, (l->n - l->head) * sizeof *l->r);
        l->n -= l->head;
        l->head = 0;
    }
    if (l != NULL && l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        struct retired *r = realloc(l->r, cap * sizeof *r);
        if (r != NULL) {
            l->r = r;
            l->cap = cap;
        }
    }
    if (l == NULL || l->n == l->cap) {
        rte_rcu_qsbr_quiescent(nfc_rcu, lcore); /* a forwarding lcore holds no state here but e */
        rte_rcu_qsbr_check(nfc_rcu, e.token, true);
        release(&e);
        return;
    }
    l->r[l->n++] = e;
}

void nfc_state_reclaim(unsigned lcore, int wait)
{
    struct retire_list *l = &retired[lcore];
    while (l->head < l->n && rte_rcu_qsbr_check(nfc_rcu, l->r[l->head].token, wait) == 1)
        release(&l->r[l->head++]);
    if (l->head == l->n)
        l->head = l->n = 0;
}

/* ---- inserts and removals ------------------------------------------------------------------ */

void nfc_state_expire(struct nfc_table *t, const uint8_t *key, const void *rec)
{
    rte_spinlock_t *lock = &writer[t - nfc_tables];
    void *now = NULL;
    int32_t pos = -1;
    rte_spinlock_lock(lock);
    /* another lcore may have removed it, or replaced it with a live entry, meanwhile */
    if (rte_hash_lookup_data(t->h, key, &now) >= 0 && now == rec)
        pos = rte_hash_del_key(t->h, key);
    rte_spinlock_unlock(lock);
    if (pos >= 0)
        retire(t, (void *)(uintptr_t)rec, pos);
}

int nfc_state_insert(struct nfc_table *t, const uint8_t *key, const uint64_t *values, uint64_t timeout_ns)
{
    unsigned n = t->nvalues;
    /* a line of its own: lcores refreshing the expiries of different flows never write one line */
    uint64_t *v = aligned_alloc(64, (((size_t)n + 2) * sizeof *v + 63) & ~(size_t)63);
    if (v == NULL)
        return -1;
    memcpy(v, values, n * sizeof *v);
    v[n + 1] = timeout_ns;
    v[n] = nfc_now_ns() + timeout_ns;
    rte_spinlock_t *lock = &writer[t - nfc_tables];
    void *old = NULL;
    rte_spinlock_lock(lock);
    int had = rte_hash_lookup_data(t->h, key, &old) >= 0;
    int added = rte_hash_add_key_data(t->h, key, v) >= 0; /* an existing key's data is swapped atomically */
    rte_spinlock_unlock(lock);
    if (!added)
        free(v); /* never published */
    else if (had)
        retire(t, old, -1);
    return 0;
}

/* ---- port pools of a carrier-grade NAT --------------------------------------------------------
 * One pool (a 65536-bit map, 8 KiB) per external address, made on its first use and found by
 * open addressing, so the number of addresses is bounded by memory only (it was a fixed 256:
 * the 257th address got 0 while the reference allocated).  Every lcore allocates, one at a
 * time (`pools_lock`). */
struct nfc_pool {
    uint64_t addr;
    uint64_t *used; /* NULL: a free slot */
};

static struct nfc_pool *pools;
static size_t pools_cap, pools_n;
static rte_spinlock_t pools_lock = RTE_SPINLOCK_INITIALIZER;

static struct nfc_pool *pool_slot(struct nfc_pool *in, size_t cap, uint64_t addr)
{
    size_t i = (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
    while (in[i].used != NULL && in[i].addr != addr)
        i = (i + 1) & (cap - 1);
    return &in[i];
}

static uint64_t *pool_of(uint64_t ext_ip)
{
    if (2 * (pools_n + 1) > pools_cap) { /* keep the table at most half full: grow and rehash */
        size_t bigger = pools_cap ? 2 * pools_cap : 64;
        struct nfc_pool *fresh = calloc(bigger, sizeof *fresh);
        if (fresh == NULL)
            return NULL;
        for (size_t i = 0; i < pools_cap; i++)
            if (pools[i].used != NULL)
                *pool_slot(fresh, bigger, pools[i].addr) = pools[i];
        free(pools);
        pools = fresh;
        pools_cap = bigger;
    }
    struct nfc_pool *slot = pool_slot(pools, pools_cap, ext_ip);
    if (slot->used == NULL) {
        slot->used = calloc(1024, sizeof(uint64_t));
        if (slot->used == NULL)
            return NULL;
        slot->addr = ext_ip;
        pools_n++;
    }
    return slot->used;
}

uint64_t nfc_alloc_port(uint64_t ext_ip)
{
    uint64_t port = 0;
    rte_spinlock_lock(&pools_lock);
    uint64_t *used = pool_of(ext_ip);
    for (unsigned w = 1024 / 64; used != NULL && w < 1024; w++) /* ports below 1024 are never given out */
        if (used[w] != ~0ull) {
            unsigned bit = (unsigned)__builtin_ctzll(~used[w]);
            used[w] |= 1ull << bit;
            port = w * 64u + bit;
            break;
        }
    rte_spinlock_unlock(&pools_lock);
    return port;
}
