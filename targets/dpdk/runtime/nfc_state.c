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

static uint64_t *port_time(uint64_t addr, uint64_t port);
static void ports_hold(uint64_t *slot, uint64_t until);

/* Publish a record for key: values, then the expiry and the timeout; `slot` (or NULL) the
 * time of the port the entry holds, set to its expiry once it is in the table. */
static int insert(struct nfc_table *t, const uint8_t *key, const uint64_t *values, uint64_t timeout_ns,
                  uint64_t *slot)
{
    unsigned n = t->value_words;
    /* a line of its own: lcores refreshing the expiries of different flows never write one line */
    uint64_t *v = aligned_alloc(64, (((size_t)n + 3) * sizeof *v + 63) & ~(size_t)63);
    if (v == NULL)
        return -1;
    memcpy(v, values, n * sizeof *v);
    v[n + 2] = (uintptr_t)slot;
    v[n + 1] = timeout_ns;
    v[n] = nfc_now_ns() + timeout_ns;
    rte_spinlock_t *lock = &writer[t - nfc_tables];
    void *old = NULL;
    rte_spinlock_lock(lock);
    int had = rte_hash_lookup_data(t->h, key, &old) >= 0;
    int added = rte_hash_add_key_data(t->h, key, v) >= 0; /* an existing key's data is swapped atomically */
    rte_spinlock_unlock(lock);
    if (!added)
        free(v); /* never published; a port given out for it stays held, as the reference's does */
    else if (had)
        retire(t, old, -1);
    if (added && slot != NULL)
        ports_hold(slot, v[n]);
    return 0;
}

int nfc_state_insert(struct nfc_table *t, const uint8_t *key, const uint64_t *values, uint64_t timeout_ns)
{
    return insert(t, key, values, timeout_ns, NULL);
}

int nfc_state_insert_held(struct nfc_table *t, const uint8_t *key, const uint64_t *values, uint64_t timeout_ns,
                          uint64_t addr, uint64_t port)
{
    uint64_t *slot = port_time(addr, port);
    return slot != NULL ? insert(t, key, values, timeout_ns, slot) : -1;
}

/* ---- port pools of a carrier-grade NAT --------------------------------------------------------
 * Per external address (made on its first use and found by open addressing, so the number of
 * addresses is bounded by memory only), each port's time: held until then, free after it (0:
 * never given out; UINT64_MAX: given out and held for ever).  An entry of the state that holds
 * ports sets its port's time to its expiry when inserted and on every refresh
 * (nfc_state_touch_held, lock-free), so the port of an expired mapping is free again.  The
 * times are kept in blocks of 64 ports, made when a block is first needed and never moved or
 * freed: an entry keeps a pointer to its port's time.  A block (1 KiB, aligned to its size)
 * has after its 64 times `low`, a lower bound of them (exact after each scan of the block; a
 * refresh only raises a time, an insert lowers `low` with it), so alloc_port skips a block
 * whose every port is held past now.  Every lcore allocates, one at a time (`pools_lock`).
 *
 * A refresh on one lcore and an allocation on another at the very nanosecond the holder
 * expires can both succeed (the refresh found the entry live just before): the port then has
 * two mappings.  Two lcores order their packets by arrival only to that grain; keep a
 * mapping's packets on one lcore (RSS) and the window is one lookup long. */
#define BLOCK_BYTES 1024u
#define LOW 64 /* a block's lower bound, after its 64 times */

struct nfc_pool {
    uint64_t addr;
    uint64_t **blocks; /* 1024 blocks of 64 ports; NULL: a free slot of the pool table */
};

static struct nfc_pool *pools;
static size_t pools_cap, pools_n;
static rte_spinlock_t pools_lock = RTE_SPINLOCK_INITIALIZER;

static struct nfc_pool *pool_slot(struct nfc_pool *in, size_t cap, uint64_t addr)
{
    size_t i = (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
    while (in[i].blocks != NULL && in[i].addr != addr)
        i = (i + 1) & (cap - 1);
    return &in[i];
}

/* The blocks of address ext_ip's pool, made if new (under pools_lock); NULL when memory runs out. */
static uint64_t **pool_of(uint64_t ext_ip)
{
    if (2 * (pools_n + 1) > pools_cap) { /* keep the table at most half full: grow and rehash */
        size_t bigger = pools_cap ? 2 * pools_cap : 64;
        struct nfc_pool *fresh = calloc(bigger, sizeof *fresh);
        if (fresh == NULL)
            return NULL;
        for (size_t i = 0; i < pools_cap; i++)
            if (pools[i].blocks != NULL)
                *pool_slot(fresh, bigger, pools[i].addr) = pools[i];
        free(pools);
        pools = fresh;
        pools_cap = bigger;
    }
    struct nfc_pool *slot = pool_slot(pools, pools_cap, ext_ip);
    if (slot->blocks == NULL) {
        slot->blocks = calloc(1024, sizeof *slot->blocks);
        if (slot->blocks == NULL)
            return NULL;
        slot->addr = ext_ip;
        pools_n++;
    }
    return slot->blocks;
}

/* Block w of a pool, made (every port free, low 0) if new; NULL when memory runs out. */
static uint64_t *block(uint64_t **blocks, unsigned w)
{
    if (blocks[w] == NULL && (blocks[w] = aligned_alloc(BLOCK_BYTES, BLOCK_BYTES)) != NULL)
        memset(blocks[w], 0, BLOCK_BYTES);
    return blocks[w];
}

static uint64_t *port_time(uint64_t addr, uint64_t port)
{
    rte_spinlock_lock(&pools_lock);
    uint64_t **blocks = pool_of(addr);
    uint64_t *b = blocks != NULL ? block(blocks, (unsigned)(port & 0xffff) / 64) : NULL;
    rte_spinlock_unlock(&pools_lock);
    return b != NULL ? &b[port % 64] : NULL;
}

static void ports_hold(uint64_t *slot, uint64_t until)
{
    uint64_t *b = (uint64_t *)((uintptr_t)slot & ~(uintptr_t)(BLOCK_BYTES - 1));
    rte_spinlock_lock(&pools_lock);
    __atomic_store_n(slot, until, __ATOMIC_RELAXED);
    if (until < b[LOW])
        b[LOW] = until;
    rte_spinlock_unlock(&pools_lock);
}

uint64_t nfc_alloc_port(uint64_t ext_ip)
{
    uint64_t port = 0, now = nfc_now_ns();
    rte_spinlock_lock(&pools_lock);
    uint64_t **blocks = pool_of(ext_ip);
    for (unsigned w = 1024 / 64; blocks != NULL && w < 1024 && port == 0; w++) { /* never a port below 1024 */
        if (blocks[w] != NULL && blocks[w][LOW] > now)
            continue; /* every port of the block held past now */
        uint64_t *b = block(blocks, w), low = UINT64_MAX;
        if (b == NULL)
            break;
        for (unsigned i = 0; i < 64; i++) {
            uint64_t until = __atomic_load_n(&b[i], __ATOMIC_RELAXED);
            if (port == 0 && until <= now) {
                until = UINT64_MAX;
                __atomic_store_n(&b[i], until, __ATOMIC_RELAXED);
                port = w * 64u + i;
            }
            low = until < low ? until : low;
        }
        b[LOW] = low;
    }
    rte_spinlock_unlock(&pools_lock);
    return port;
}
