/* nfc server runtime: the writers' side of data-plane state shared by every forwarding lcore
 * (nfc_state.h has the layout and the lookups): inserts and removals under each table's
 * spinlock, what they replace retired per lcore until a grace period has passed, and the
 * CGN's port pools.  Hand-written, shared by every generated program. */
#include <errno.h>
#include <stdio.h>
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

/* ---- records: per lcore and table, those it released, kept for its next inserts ------------ */

/* A table's records are all of one size (nfc_state_rec_bytes): a record an lcore releases goes
 * on its list for that table (linked through the record's first word) and its next insert takes
 * it, without malloc.  An aligned_alloc and a free per new flow were ~18 % of a churned flow's
 * cost (bench/bench_cost.py's insert program, perf).  A list holds at most NFC_REC_KEEP
 * records; a thread that is no lcore uses malloc. */
#define NFC_REC_KEEP 4096

/* Under ASan a listed record is poisoned, as freed memory is: a reader still holding a record
 * released before its grace period is caught while the record waits on the list. */
#if defined(__SANITIZE_ADDRESS__)
#define NFC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang before 2025 says it only so */
#define NFC_ASAN 1
#endif
#endif
#ifdef NFC_ASAN
#include <sanitizer/asan_interface.h>
#define REC_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define REC_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define REC_POISON(p, n) ((void)(p), (void)(n))
#define REC_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct rec_list {
    void *head;
    uint32_t n;
};

static struct rec_list kept_recs[RTE_MAX_LCORE][NFC_MAX_TABLES];

static uint64_t *rec_alloc(const struct nfc_table *t)
{
    unsigned lcore = rte_lcore_id();
    struct rec_list *l = lcore < RTE_MAX_LCORE ? &kept_recs[lcore][t - nfc_tables] : NULL;
    if (l != NULL && l->head != NULL) {
        void *r = l->head;
        REC_UNPOISON(r, nfc_state_rec_bytes(t));
        l->head = *(void **)r;
        l->n--;
        return r;
    }
    return aligned_alloc(64, nfc_state_rec_bytes(t));
}

static void rec_free(const struct nfc_table *t, void *rec)
{
    unsigned lcore = rte_lcore_id();
    struct rec_list *l = lcore < RTE_MAX_LCORE ? &kept_recs[lcore][t - nfc_tables] : NULL;
    if (rec != NULL && l != NULL && l->n < NFC_REC_KEEP) {
        *(void **)rec = l->head;
        l->head = rec;
        l->n++;
        REC_POISON(rec, nfc_state_rec_bytes(t));
        return;
    }
    free(rec);
}

static void release(struct retired *e)
{
    if (e->pos >= 0) { /* a writer's call on t->h: under its lock */
        rte_spinlock_t *lock = &writer[e->t - nfc_tables];
        rte_spinlock_lock(lock);
        rte_hash_free_key_with_position(e->t->h, e->pos);
        rte_spinlock_unlock(lock);
    }
    rec_free(e->t, e->rec);
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

static int pinned(const struct nfc_table *t, const uint8_t *key)
{
    struct rte_hash *pins = __atomic_load_n(&t->pins, __ATOMIC_ACQUIRE);
    return pins != NULL && rte_hash_lookup(pins, key) >= 0;
}

int nfc_state_expire(struct nfc_table *t, const uint8_t *key, const void *rec)
{
    if (pinned(t, key))
        return 1;
    rte_spinlock_t *lock = &writer[t - nfc_tables];
    void *now = NULL;
    int32_t pos = -1, kept = 0;
    rte_spinlock_lock(lock);
    /* pinned meanwhile (pins are added under this lock: nfc_state_pin), or removed or replaced
     * with a live entry by another lcore */
    kept = pinned(t, key);
    if (!kept && rte_hash_lookup_data(t->h, key, &now) >= 0 && now == rec)
        pos = rte_hash_del_key(t->h, key);
    if (pos >= 0) /* (relaxed atomics: the control thread reads it for the counters) */
        __atomic_store_n(&t->live, t->live - 1, __ATOMIC_RELAXED);
    rte_spinlock_unlock(lock);
    if (pos >= 0)
        retire(t, (void *)(uintptr_t)rec, pos);
    return kept;
}

static uint64_t *port_time(uint64_t addr, uint64_t port);
static void ports_hold(uint64_t *slot, uint64_t until);
static uint64_t *held_slot(const struct nfc_table *t, const uint64_t *v);

/* ---- the sweep of a full table --------------------------------------------------------------
 * An insert of a new key into a full table (cap live entries) first removes expired entries, as
 * the reference's does (compiler/interp/state.py, state_insert): a table of flows that never
 * came back (an expired entry is otherwise removed only by a lookup of its key) would refuse
 * every new flow.  The insert looks at the next SWEEP_BATCH entries from the sweep's cursor
 * (rte_hash_iterate: a deletion moves no other entry of a table without extendable buckets)
 * and removes the expired ones not pinned, so its cost is bounded and a round of the table is
 * spread over the inserts that find it full.  The removed entries' key slots wait for their
 * grace period; h has room for them (nfc_state_slots), so the insert that swept takes a slot at
 * once.  A round's earliest unexpired expiry, lowered by every insert since, is `next_expiry`:
 * before it nothing has expired and a full table refuses the insert without looking (a refresh
 * only moves an expiry later; an entry the cuckoo moved behind the cursor during a round is
 * missed until the round after `next_expiry`, which may be as late as the other entries'
 * earliest expiry).  A pinned entry does not count (it does not expire: its unpin lowers
 * `next_expiry`, pin_drop).  A batch that removes nothing holds off the next one for
 * SWEEP_DUTY - 1 times as long as it took, so a full table whose expired entries are sparse (or
 * just past their expiry, before the cursor gets there) costs the lcore at most 1/SWEEP_DUTY of
 * its time in sweeps.  The reference removes every expired entry at once; this removes only
 * those of the batches, so an insert into a full table whose expired entries are rarer than
 * one in SWEEP_BATCH may be refused where the reference's is not. */
#define SWEEP_BATCH 256u
#define SWEEP_DUTY 8u

/* Under t's writer lock: an entry that expires at `until` (made, refreshed or unpinned) brings
 * the sweep's bounds down to it. */
static void lower_bounds(struct nfc_table *t, uint64_t until)
{
    t->next_expiry = until < t->next_expiry ? until : t->next_expiry;
    t->sweep_low = until < t->sweep_low ? until : t->sweep_low;
}

/* Under t's writer lock: the batch's expired entries removed into gone[] (retired by the
 * caller once the lock is released); how many. */
static unsigned sweep(struct nfc_table *t, uint64_t now, struct retired *gone)
{
    const void *key;
    void *d;
    unsigned n = 0, wrapped = 0;
    for (unsigned seen = 0; seen < SWEEP_BATCH;) {
        if (rte_hash_iterate(t->h, &key, &d, &t->sweep_next) < 0) { /* a whole round: on from the start */
            t->next_expiry = t->sweep_low;
            t->sweep_low = UINT64_MAX;
            t->sweep_next = 0;
            if (wrapped++)
                break;
            continue;
        }
        seen++;
        uint64_t until = nfc_state_expiry(d, t->value_words);
        if (until > now) {
            t->sweep_low = until < t->sweep_low ? until : t->sweep_low;
            continue;
        }
        int32_t pos = pinned(t, key) ? -1 : rte_hash_del_key(t->h, key);
        if (pos >= 0)
            gone[n++] = (struct retired){0, t, d, pos};
    }
    __atomic_store_n(&t->live, t->live - n, __ATOMIC_RELAXED);
    __atomic_store_n(&t->swept, t->swept + n, __ATOMIC_RELAXED);
    if (n == 0)
        t->sweep_after = now + (nfc_now_ns() - now) * (SWEEP_DUTY - 1);
    return n;
}

/* Publish a record for key: values, then the expiry and the timeout; `slot` (or NULL) the
 * time of the port the entry holds, set to its expiry once it is in the table. */
static int insert(struct nfc_table *t, const uint8_t *key, const uint64_t *values, uint64_t timeout_ns,
                  uint64_t *slot)
{
    uint64_t *v = rec_alloc(t);
    if (v == NULL)
        return -1;
    nfc_state_rec_init(t, v, values, timeout_ns, slot);
    uint64_t until = v[t->value_words], now = until - timeout_ns; /* when the record was made */
    rte_spinlock_t *lock = &writer[t - nfc_tables];
    struct retired gone[SWEEP_BATCH];
    unsigned swept = 0;
    void *old = NULL;
    rte_spinlock_lock(lock);
    int had = rte_hash_lookup_data(t->h, key, &old) >= 0;
    if (!had && t->live >= t->cap && t->next_expiry <= now && t->sweep_after <= now)
        swept = sweep(t, now, gone);
    /* an existing key's data is swapped atomically */
    int added = (had || t->live < t->cap) && rte_hash_add_key_data(t->h, key, v) >= 0;
    if (added) {
        __atomic_store_n(&t->live, t->live + !had, __ATOMIC_RELAXED);
        lower_bounds(t, until);
    }
    rte_spinlock_unlock(lock);
    for (unsigned i = 0; i < swept; i++)
        retire(t, gone[i].rec, gone[i].pos);
    if (!added)
        rec_free(t, v); /* never published; a port given out for it stays held, as the reference's does */
    else if (had)
        retire(t, old, -1);
    if (added && slot != NULL)
        ports_hold(slot, v[t->value_words]);
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

/* The word of key field f in the keys nfc_entry_add takes (nfc_words each: a field over 64 bits
 * takes two). */
static unsigned key_word(const struct nfc_table *t, unsigned f)
{
    unsigned w = 0;
    for (unsigned i = 0; i < f; i++)
        w += nfc_words(t->key_width[i]);
    return w;
}

void *nfc_state_loaded(struct nfc_table *t, const uint64_t *keys, const uint64_t *values)
{
    uint64_t *slot = t->holds_ports ? port_time(keys[key_word(t, t->held_key[0])], keys[key_word(t, t->held_key[1])])
                                    : NULL;
    uint64_t *v = t->holds_ports && slot == NULL ? NULL : aligned_alloc(64, nfc_state_rec_bytes(t));
    if (v == NULL)
        return NULL;
    nfc_state_rec_init(t, v, values, t->timeout_ns, slot);
    if (slot != NULL)
        ports_hold(slot, v[t->value_words]);
    return v;
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

/* ---- pins: what the switch holds of a switch-cached state (the control thread) -------------
 * Each pinned key of a table has a `struct pin` in t->pins (an rte_hash with a reader-writer
 * lock: the lcores look a key up only when its entry's timer has run out, the control thread
 * is its one writer).  `own`: the manager pinned it (the entry is on the switch); `linked`: pins
 * by entries whose links name it.  A pin of an entry that holds a port holds the port for
 * ever (UINT64_MAX) until the last pin goes; the port then gets the entry's expiry back.
 * The control thread reads records online in the RCU set (CTL_THREAD), so none it looks at
 * is freed under it. */
#define PIN_CAP (1u << 20)
#define CTL_THREAD NFC_CTL_RCU_THREAD

struct pin {
    uint32_t own, linked;
    uint8_t nlinks;                         /* the links as they were when first pinned by the manager */
    uint8_t link_table[NFC_MAX_LINKS];
    uint8_t link_key[NFC_MAX_LINKS][NFC_MAX_KEY];
};

static uint64_t *held_slot(const struct nfc_table *t, const uint64_t *v)
{
    return (uint64_t *)(uintptr_t)v[t->value_words + 2];
}

static int holds_ports(const struct nfc_table *t, const uint64_t *v)
{
    return held_slot(t, v) != NULL;
}

static struct rte_hash *pins_of(struct nfc_table *t)
{
    if (t->pins != NULL)
        return t->pins;
    char name[RTE_HASH_NAMESIZE];
    snprintf(name, sizeof name, "nfc_pins_%d", (int)(t - nfc_tables));
    uint32_t entries = t->cap < 8 ? 8 : t->cap < PIN_CAP ? t->cap : PIN_CAP; /* rte_hash's least: 8 */
    __atomic_store_n(&t->pins, nfc_hash_new(name, entries, t->key_bytes, RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY),
                     __ATOMIC_RELEASE);
    return t->pins;
}

static struct pin *pin_of(const struct nfc_table *t, const uint8_t *key)
{
    void *p = NULL;
    return t->pins != NULL && rte_hash_lookup_data(t->pins, key, &p) >= 0 ? p : NULL;
}

/* The record of key if the entry is live or pinned, else NULL. */
static uint64_t *record(const struct nfc_table *t, const uint8_t *key)
{
    void *d = NULL;
    if (rte_hash_lookup_data(t->h, key, &d) < 0)
        return NULL;
    if (nfc_state_expiry(d, t->value_words) > nfc_now_ns() || pin_of(t, key) != NULL)
        return d;
    return NULL;
}

/* A pin of key's live (or pinned) entry, counted in `own` or `linked`, its record in *rec:
 * the pin; NULL: no such entry (*rec NULL) or no memory.  Under the table's writer lock, so no
 * lcore removes the entry between the check and the pin (nfc_state_expire). */
static struct pin *pin_add(struct nfc_table *t, const uint8_t *key, int own, uint64_t **rec)
{
    struct rte_hash *h = pins_of(t);
    struct pin *fresh = calloc(1, sizeof *fresh), *p = NULL;
    rte_spinlock_t *lock = &writer[t - nfc_tables];
    rte_spinlock_lock(lock);
    uint64_t *v = *rec = record(t, key);
    if (v != NULL && h != NULL && (p = pin_of(t, key)) == NULL && fresh != NULL &&
        rte_hash_add_key_data(h, key, fresh) >= 0) {
        p = fresh;
        fresh = NULL;
        if (holds_ports(t, v))
            ports_hold(held_slot(t, v), UINT64_MAX);
    }
    if (p != NULL && own)
        p->own = 1; /* the switch holds it: a flag (a runtime that restarted pins again what it finds there) */
    else if (p != NULL)
        p->linked++;
    rte_spinlock_unlock(lock);
    free(fresh);
    return p;
}

/* One pin of key gone; the last one releases the entry (and its port, until its expiry). */
static void pin_drop(struct nfc_table *t, const uint8_t *key, int own)
{
    struct pin *p = pin_of(t, key);
    if (p == NULL)
        return;
    if (own)
        p->own = 0;
    else if (p->linked > 0)
        p->linked--;
    if (p->own > 0 || p->linked > 0)
        return;
    rte_hash_del_key(t->pins, key);
    free(p);
    void *d = NULL;
    int found = rte_hash_lookup_data(t->h, key, &d) >= 0;
    if (found) { /* it may expire now: a sweep's bound comes down to it */
        rte_spinlock_t *lock = &writer[t - nfc_tables];
        uint64_t until = nfc_state_expiry(d, t->value_words);
        rte_spinlock_lock(lock);
        lower_bounds(t, until);
        rte_spinlock_unlock(lock);
    }
    if (found && holds_ports(t, d)) {
        /* the port held until the entry's expiry again; a refresh between the read of the
         * expiry and the store found the port held for ever and left it: read again */
        ports_hold(held_slot(t, d), nfc_state_expiry(d, t->value_words));
        nfc_hold_until(held_slot(t, d), nfc_state_expiry(d, t->value_words));
    }
}

/* Link j of record v into key: 1; 0: never written (or an lcore kept writing it). */
static int link_read(const struct nfc_table *t, const uint64_t *v, unsigned j, uint8_t *key)
{
    const uint64_t *w = &v[t->link_off[j]];
    for (int tries = 0; tries < 1000; tries++) {
        uint64_t seq = __atomic_load_n(w, __ATOMIC_ACQUIRE);
        if (seq == 0)
            return 0;
        if (seq & 1)
            continue;
        memcpy(key, w + 1, nfc_tables[t->link_table[j]].key_bytes);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(w, __ATOMIC_RELAXED) == seq)
            return 1;
    }
    return 0;
}

static void ctl_online(void)
{
    rte_rcu_qsbr_thread_register(nfc_rcu, CTL_THREAD);
    rte_rcu_qsbr_thread_online(nfc_rcu, CTL_THREAD);
}

static void ctl_offline(void)
{
    rte_rcu_qsbr_thread_offline(nfc_rcu, CTL_THREAD);
    rte_rcu_qsbr_thread_unregister(nfc_rcu, CTL_THREAD);
}

int nfc_state_pin(struct nfc_table *t, const uint8_t *key, uint64_t *out)
{
    ctl_online();
    uint64_t *v = NULL;
    struct pin *was = pin_of(t, key); /* (the control thread is the pins' one writer) */
    int again = was != NULL && was->own;
    struct pin *p = pin_add(t, key, 1, &v);
    int st = v == NULL ? 0 : p == NULL ? -1 : 1;
    if (p != NULL && !again) { /* first pinned by the manager: its links pinned with it */
        p->nlinks = 0;
        for (unsigned j = 0; j < t->nlinks && st == 1; j++) {
            struct nfc_table *y = &nfc_tables[t->link_table[j]];
            uint8_t *yk = p->link_key[p->nlinks];
            uint64_t *yv = NULL;
            if (!link_read(t, v, j, yk))
                st = 0; /* no server hit noted what it refreshes: not cached (yet) */
            else if (pin_add(y, yk, 0, &yv) != NULL)
                p->link_table[p->nlinks++] = t->link_table[j];
            else if (yv != NULL)
                st = -1; /* no memory */
            /* else the refresh found no entry: nothing to keep alive */
        }
        if (st != 1) { /* undone: the pin and the links pinned so far */
            for (unsigned j = 0; j < p->nlinks; j++)
                pin_drop(&nfc_tables[p->link_table[j]], p->link_key[j], 0);
            pin_drop(t, key, 1);
        }
    }
    if (st == 1)
        nfc_values_of(t, v, out);
    ctl_offline();
    return st == 1 && again ? 2 : st;
}

int nfc_state_unpin(struct nfc_table *t, const uint8_t *key)
{
    ctl_online();
    struct pin *p = pin_of(t, key);
    int st = p != NULL && p->own ? 0 : -1;
    if (st == 0)
        for (unsigned j = 0; j < p->nlinks; j++)
            pin_drop(&nfc_tables[p->link_table[j]], p->link_key[j], 0);
    if (st == 0)
        pin_drop(t, key, 1);
    ctl_offline();
    return st;
}

/* Entry v of t hit at hit_ns: its expiry (and its port's time) raised to hit_ns + its timeout. */
static void touch_at(const struct nfc_table *t, uint64_t *v, uint64_t hit_ns)
{
    unsigned n = t->value_words;
    uint64_t until = hit_ns + v[n + 1], old = __atomic_load_n(&v[n], __ATOMIC_RELAXED);
    while (old < until && !__atomic_compare_exchange_n(&v[n], &old, until, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    if (holds_ports(t, v))
        nfc_hold_until(held_slot(t, v), until);
}

int nfc_state_touch_at(struct nfc_table *t, const uint8_t *key, uint64_t hit_ns)
{
    ctl_online();
    uint64_t *v = record(t, key);
    if (v != NULL) {
        if (t->refresh)
            touch_at(t, v, hit_ns);
        uint8_t yk[NFC_MAX_KEY];
        for (unsigned j = 0; j < t->nlinks; j++) {
            struct nfc_table *y = &nfc_tables[t->link_table[j]];
            uint64_t *yv = link_read(t, v, j, yk) ? record(y, yk) : NULL;
            if (yv != NULL)
                touch_at(y, yv, hit_ns);
        }
    }
    ctl_offline();
    return v != NULL;
}

uint32_t nfc_state_overdue(struct nfc_table *t, uint64_t *out, uint32_t max)
{
    uint32_t n = 0, next = 0;
    const void *key;
    void *p, *d;
    if (t->pins == NULL)
        return 0;
    ctl_online();
    uint64_t now = nfc_now_ns(), *o = out;
    while (n < max && rte_hash_iterate(t->pins, &key, &p, &next) >= 0) {
        if (((struct pin *)p)->own == 0 || rte_hash_lookup_data(t->h, key, &d) < 0 ||
            nfc_state_expiry(d, t->value_words) > now)
            continue;
        o += nfc_key_fields(t, key, o);
        n++;
    }
    ctl_offline();
    return n;
}
