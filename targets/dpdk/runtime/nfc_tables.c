/* nfc server runtime: the server's tables (described by the generated nf.c in nfc_tables[])
 * and the entry operations of the control plane.  Forwarding lcores read the tables without
 * locks; the control plane is one writer (the entries file before forwarding starts, then the
 * control thread).  Control-plane tables are lock-free rte_hash tables
 * (RW_CONCURRENCY_LF): a replaced value or a deleted key is freed only after every
 * forwarding lcore has passed a quiescent state (rte_rcu_qsbr), so a reader never sees freed
 * memory.  Data-plane state is the other way round: its writers are the forwarding lcores
 * (nfc_state.c: lock-free readers too, what is replaced freed after a grace period), so
 * the control thread never walks it while they forward; it asks an lcore for a copy instead
 * (nfc_state_copy_*).
 * Hand-written, shared by every generated program. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rte_branch_prediction.h>
#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_pause.h>
#include <rte_rcu_qsbr.h>
#include <rte_rwlock.h>

#include "nfc_ctl.h"
#include "nfc_rt.h"

struct rte_rcu_qsbr *nfc_rcu; /* every forwarding lcore reports its quiescent states to it */
static int have_state;        /* some table is data-plane state */
uint64_t nfc_clock_origin;

uint32_t nfc_crc_t[2][8][256];

/* nfc_crc_t (nfc_rt.h): CRC-16/ARC's tables (reflected polynomial 0xA001) and CRC-32's
 * (0xEDB88320), before main, so that a packet's hash never waits for them. */
__attribute__((constructor)) static void nfc_crc_tables(void)
{
    static const uint32_t poly[2] = {0xA001u, 0xEDB88320u};
    for (int c = 0; c < 2; c++) {
        uint32_t(*t)[256] = nfc_crc_t[c];
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t r = i;
            for (int k = 0; k < 8; k++)
                r = (r & 1) ? (r >> 1) ^ poly[c] : r >> 1;
            t[0][i] = r;
        }
        for (int k = 1; k < 8; k++)
            for (uint32_t i = 0; i < 256; i++)
                t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    }
}

/* An LPM table's trie: the LPM field's place in the key, the length byte after the fields;
 * the other key fields name the VRF. */
static int trie_init(struct nfc_table *t)
{
    unsigned off = 0, lpm_off = 0;
    for (int i = 0; i < t->nkeys; i++) {
        if (i == t->lpm)
            lpm_off = off;
        off += t->key_width[i];
    }
    char name[RTE_HASH_NAMESIZE];
    snprintf(name, sizeof name, "nfc_vrf_%d", (int)(t - nfc_tables));
#ifdef NFC_LPM_STRIDE1 /* the generator's choice overridden (bench/bench_lpm_memory.py builds both) */
    t->lpm_stride1 = NFC_LPM_STRIDE1;
#endif
    return nfc_lpm_init(&t->trie, t->key_width[t->lpm], lpm_off, off, t->key_bytes, t->nkeys > 1, t->lpm_stride1,
                        name);
}

/* The capacity that keeps n control-plane entries below 7/8 full (rte_hash's cuckoo inserts
 * fail more often above it). */
static uint64_t room_for(uint64_t n)
{
    return n > UINT32_MAX ? (uint64_t)UINT32_MAX + 1 : n + n / 7 + 1;
}

/* Table i's rte_hash of `entries` keys; each one of a table has a name of its own. */
static struct rte_hash *hash_new(const struct nfc_table *t, int i, uint32_t entries)
{
    static unsigned made;
    char name[RTE_HASH_NAMESIZE];
    snprintf(name, sizeof name, "nfc_%d_%u", i, made++);
    /* lock-free readers; one writer at a time: the control thread (control-plane tables) or
     * a forwarding lcore holding the table's lock (data-plane state, nfc_state.c) */
    return nfc_hash_new(name, entries, t->key_bytes, RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF);
}

int nfc_tables_init(void)
{
    nfc_clock_origin = rte_get_timer_cycles();
    /* every lcore, and the control thread as NFC_CTL_RCU_THREAD (it reads state records: nfc_state.c) */
    size_t sz = rte_rcu_qsbr_get_memsize(NFC_CTL_RCU_THREAD + 1);
    nfc_rcu = rte_zmalloc("nfc_rcu", sz, RTE_CACHE_LINE_SIZE);
    if (nfc_rcu == NULL || rte_rcu_qsbr_init(nfc_rcu, NFC_CTL_RCU_THREAD + 1) != 0) {
        fprintf(stderr, "nfc: cannot create the RCU state\n");
        return 1;
    }
    for (int i = 0; i < nfc_ntables; i++) {
        struct nfc_table *t = &nfc_tables[i];
        have_state |= t->state;
        t->key_words = t->value_words = 0;
        t->link_words = 0;
        if (t->acl)
            t->lpm = -1; /* an ACL's LPM field is a mask of its rules, not a trie */
        t->arg_words = t->acl ? 1 : t->lpm >= 0; /* the priority; the prefix length */
        for (int k = 0; k < t->nkeys; k++) {
            t->key_words = (uint8_t)(t->key_words + nfc_words(t->key_width[k]));
            if (t->acl && t->match[k] != NFC_M_EXACT)
                t->arg_words = (uint8_t)(t->arg_words + (t->match[k] == NFC_M_LPM ? 1 : nfc_words(t->key_width[k])));
        }
        for (int k = 0; k < t->nvalues; k++)
            t->value_words = (uint8_t)(t->value_words + nfc_words(t->value_width[k]));
        for (int j = 0; j < t->nlinks; j++) { /* after the expiry, the timeout and the port slot */
            t->link_off[j] = (uint16_t)(t->value_words + 3 + t->link_words);
            t->link_words = (uint16_t)(t->link_words + 1 + (nfc_tables[t->link_table[j]].key_bytes + 7) / 8);
        }
        /* data-plane state: its declared size (its writer, the lcore, cannot grow it);
         * control-plane tables start small and grow with what is loaded (put) */
        t->cap = t->state ? (t->size < NFC_TABLE_CAP ? t->size : NFC_TABLE_CAP)
                          : (uint32_t)(room_for(t->size) < NFC_GROW_FROM ? room_for(t->size) : NFC_GROW_FROM);
        if (!t->state && t->cap < 8) /* rte_hash's least; a state's h has room beyond cap anyway */
            t->cap = 8;
        t->h = hash_new(t, i, t->state ? nfc_state_slots(t) : t->cap);
        t->live = t->sweep_next = 0;
        t->sweep_low = UINT64_MAX;
        t->next_expiry = t->sweep_after = t->swept = 0;
        if (t->h == NULL) {
            fprintf(stderr, "nfc: cannot create table %s (%u entries): %s\n", t->name, t->cap,
                    rte_strerror(rte_errno));
            return 1;
        }
        if (t->lpm >= 0 && trie_init(t) != 0) {
            fprintf(stderr, "nfc: cannot create the VRFs of table %s: %s\n", t->name, rte_strerror(rte_errno));
            return 1;
        }
    }
    return 0;
}

int nfc_table_find(const char *name)
{
    for (int i = 0; i < nfc_ntables; i++)
        if (strcmp(nfc_tables[i].name, name) == 0)
            return i;
    return -1;
}

/* ---- copies of a table for the control channel (DUMP, CLEAR) -------------------------------
 * A control-plane table has one writer, the control thread, so it copies the table itself
 * with rte_hash_iterate (nfc_table_copy).
 *
 * A data-plane state table changes under the forwarding lcores' hands (insert, expire; what
 * they replace is freed once every lcore has passed a quiescent state), so it is copied only
 * by a reader the grace periods wait for: a forwarding lcore between two bursts
 * (nfc_rcu_quiescent), or the control thread while no lcore forwards (`state_owner` free:
 * before START, after the end of input).  Every forwarding lcore holds `state_owner` for
 * reading from nfc_rcu_online to nfc_rcu_offline.
 *
 * Such a copy walks the table's key positions (rte_hash_get_key_with_position: one lookup per
 * position, whatever the table holds), not its buckets: rte_hash_iterate skips empty bucket
 * slots in a loop of its own, so one call could scan a whole sparse table (0.7-0.9 ms for 1M
 * slots, 20 ms cold) while the lcore forwards nothing.  The lcore copies in slices of at most
 * SLICE_NS and spends at most 1/STATE_DUTY of its time on them.
 *
 * One copy is posted at a time (`state_req`), the control thread queues the others.  Whoever
 * serves a slice takes the request out of `state_req` (CAS) and then either puts it back or
 * marks it done, its last touch; so the control thread may free a request it took back itself
 * (CAS) or found done. */

#define SLICE_NS 20000u     /* a slice of a copy by the forwarding lcore ends after this long */
#define STATE_DUTY 4u       /* ... and the next comes no sooner than (STATE_DUTY - 1) times that later */
#define SELF_NS 2000000u    /* the control thread's slices (nothing forwards) per poll */
#define STATE_WAIT_MS 1000u /* no progress for so long: the copy is withdrawn (NFC_E_BUSY) */

struct nfc_state_copy {
    const struct nfc_table *t;
    uint64_t *out;
    uint32_t max, n;  /* entries wanted, copied */
    uint32_t next;    /* the key position to look at next */
    uint32_t end;     /* key positions of the table */
    int done;         /* __atomic: complete; set last */
    uint64_t slices;  /* __atomic: slices served, the progress the control thread watches */
    /* the control thread's own */
    struct nfc_state_copy *behind; /* the queue of copies not posted yet */
    uint64_t seen, seen_at;        /* slices at the last progress seen, and when (ms) */
};

static rte_rwlock_t state_owner = RTE_RWLOCK_INITIALIZER;
static struct nfc_state_copy *state_req;          /* posted for the lcore; __atomic only */
static struct nfc_state_copy *posted, *queue, **queue_end = &queue; /* control thread only */
static uint64_t next_slice;                        /* lcores, __atomic: no slice before (timer cycles) */
static struct nfc_copy_stats copy_stats;           /* the lcore's slices; __atomic only */

int nfc_key_fields(const struct nfc_table *t, const uint8_t *key, uint64_t *out)
{
    if (t->acl)
        return nfc_acl_record(t, key, out);
    unsigned off = 0, n = 0;
    for (int i = 0; i < t->nkeys; i++) {
        nfc_to_words(nfc_getw(key, off, t->key_width[i]), t->key_width[i], out + n);
        n += nfc_words(t->key_width[i]);
        off += t->key_width[i];
    }
    if (t->lpm >= 0)
        out[n++] = nfc_get(key, off, 8);
    return (int)n;
}

static size_t stride_of(const struct nfc_table *t)
{
    return (size_t)(t->key_words + t->arg_words + t->value_words);
}

uint32_t nfc_table_copy(const struct nfc_table *t, uint32_t *next, uint32_t max, uint64_t *out)
{
    uint32_t n = 0;
    const void *key;
    void *data;
    while (n < max && rte_hash_iterate(t->h, &key, &data, next) >= 0) {
        uint64_t *r = out + n * stride_of(t);
        nfc_values_of(t, data, r + nfc_key_fields(t, key, r));
        n++;
    }
    return n;
}

/* Copy the entry at key position r->next, if one is there and has not expired; move on. */
static void copy_position(struct nfc_state_copy *r, uint64_t now_ns)
{
    const struct nfc_table *t = r->t;
    int32_t pos = (int32_t)r->next++;
    void *key, *data;
    if (rte_hash_get_key_with_position(t->h, pos, &key) != 0 || rte_hash_lookup_data(t->h, key, &data) != pos)
        return;
    if (nfc_state_expiry(data, t->value_words) <= now_ns) /* expired: the next packet of it, or a sweep, deletes it */
        return;
    uint64_t *rec = r->out + (size_t)r->n * stride_of(t);
    nfc_values_of(t, data, rec + nfc_key_fields(t, key, rec));
    r->n++;
}

/* Positions of r for `budget` timer cycles at most (at least one); the copy is then complete. */
static int serve_slice(struct nfc_state_copy *r, uint64_t budget)
{
    uint64_t start = rte_get_timer_cycles(), now_ns = nfc_now_ns();
    while (r->n < r->max && r->next < r->end) {
        copy_position(r, now_ns);
        if ((r->next & 15) == 0 && rte_get_timer_cycles() - start > budget)
            break;
    }
    return r->n == r->max || r->next >= r->end;
}

/* After a slice: back into `state_req`, or done; the server's last touch of r. */
static void hand_back(struct nfc_state_copy *r, int complete)
{
    __atomic_add_fetch(&r->slices, 1, __ATOMIC_RELEASE);
    if (complete)
        __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
    else
        __atomic_store_n(&state_req, r, __ATOMIC_RELEASE);
}

/* Take r out of `state_req`; 0: it is not there (a slice of it is being served, or it is done). */
static int take(struct nfc_state_copy *r)
{
    struct nfc_state_copy *mine = r;
    return __atomic_compare_exchange_n(&state_req, &mine, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static uint64_t cycles(uint64_t ns)
{
    return rte_get_timer_hz() / 1000 * ns / 1000000;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The forwarding lcore, between bursts: a slice of the posted copy, if its duty cycle allows. */
static void lcore_slice(void)
{
    struct nfc_state_copy *r = __atomic_load_n(&state_req, __ATOMIC_ACQUIRE);
    uint64_t start = rte_get_timer_cycles();
    if (r == NULL || start < __atomic_load_n(&next_slice, __ATOMIC_RELAXED) || !take(r))
        return;
    uint64_t cpu = thread_cpu_ns();
    int complete = serve_slice(r, cycles(SLICE_NS));
    cpu = thread_cpu_ns() - cpu;
    __atomic_add_fetch(&copy_stats.slices, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&copy_stats.cpu_ns, cpu, __ATOMIC_RELAXED);
    if (cpu > __atomic_load_n(&copy_stats.max_ns, __ATOMIC_RELAXED))
        __atomic_store_n(&copy_stats.max_ns, cpu, __ATOMIC_RELAXED);
    __atomic_store_n(&next_slice, start + (rte_get_timer_cycles() - start) * STATE_DUTY, __ATOMIC_RELAXED);
    hand_back(r, complete);
}

struct nfc_copy_stats nfc_state_copy_stats(void)
{
    struct nfc_copy_stats s = {__atomic_load_n(&copy_stats.slices, __ATOMIC_RELAXED),
                               __atomic_load_n(&copy_stats.cpu_ns, __ATOMIC_RELAXED),
                               __atomic_load_n(&copy_stats.max_ns, __ATOMIC_RELAXED)};
    return s;
}

/* The control thread copies r itself if no lcore forwards (it holds `state_owner` while it does). */
static void self_serve(struct nfc_state_copy *r)
{
    if (rte_rwlock_write_trylock(&state_owner) != 0) /* 0: taken */
        return;
    if (take(r)) /* else an lcore completed it before it went offline */
        hand_back(r, serve_slice(r, cycles(SELF_NS)));
    rte_rwlock_write_unlock(&state_owner);
}

static uint64_t now_ms(void)
{
    return rte_get_timer_cycles() / (rte_get_timer_hz() / 1000);
}

struct nfc_state_copy *nfc_state_copy_start(const struct nfc_table *t, uint32_t next, uint32_t max, uint64_t *out)
{
    struct nfc_state_copy *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->t = t;
    r->out = out;
    r->max = max;
    r->next = next;
    r->end = (uint32_t)rte_hash_max_key_id(t->h);
    *queue_end = r;
    queue_end = &r->behind;
    return r;
}

/* Post the first queued copy if none is posted. */
static void post_next(void)
{
    if (posted != NULL || queue == NULL)
        return;
    posted = queue;
    queue = posted->behind;
    if (queue == NULL)
        queue_end = &queue;
    posted->seen_at = now_ms();
    __atomic_store_n(&state_req, posted, __ATOMIC_RELEASE);
}

int nfc_state_copy_poll(struct nfc_state_copy *r, uint32_t *n, uint32_t *next)
{
    post_next();
    if (r != posted)
        return NFC_COPY_WAITING;
    self_serve(r);
    uint64_t slices = __atomic_load_n(&r->slices, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) {
        *n = r->n;
        *next = r->next < r->end ? r->next : 0;
        posted = NULL;
        post_next();
        return NFC_COPY_DONE;
    }
    if (slices != r->seen) {
        r->seen = slices;
        r->seen_at = now_ms();
    } else if (now_ms() - r->seen_at > STATE_WAIT_MS && take(r)) {
        posted = NULL;
        post_next();
        return NFC_COPY_BUSY;
    }
    return NFC_COPY_WAITING;
}

void nfc_state_copy_end(struct nfc_state_copy *r)
{
    if (r == posted) { /* the lcore holds a posted copy for one slice at most */
        while (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE) && !take(r))
            rte_pause();
        posted = NULL;
        post_next();
    }
    for (struct nfc_state_copy **p = &queue; *p != NULL; p = &(*p)->behind)
        if (*p == r) {
            *p = r->behind;
            if (*p == NULL)
                queue_end = p;
            break;
        }
    free(r);
}

void nfc_rcu_online(unsigned lcore)
{
    if (have_state)
        rte_rwlock_read_lock(&state_owner);
    rte_rcu_qsbr_thread_register(nfc_rcu, lcore);
    rte_rcu_qsbr_thread_online(nfc_rcu, lcore);
}

void nfc_rcu_quiescent(unsigned lcore)
{
    rte_rcu_qsbr_quiescent(nfc_rcu, lcore);
    if (have_state)
        nfc_state_reclaim(lcore, 0);
    if (unlikely(__atomic_load_n(&state_req, __ATOMIC_RELAXED) != NULL))
        lcore_slice(); /* between bursts: no packet is inserting or expiring state */
}

void nfc_rcu_offline(unsigned lcore)
{
    rte_rcu_qsbr_thread_offline(nfc_rcu, lcore);
    rte_rcu_qsbr_thread_unregister(nfc_rcu, lcore);
    if (have_state) {
        nfc_state_reclaim(lcore, 1);
        rte_rwlock_read_unlock(&state_owner);
    }
}

/* A field's words (least significant first) hold a number of at most `width` bits. */
static int fits(const uint64_t *words, unsigned width)
{
    unsigned top = width - 64 * (nfc_words(width) - 1);
    return top >= 64 || words[nfc_words(width) - 1] <= ((1ull << top) - 1);
}

/* A record's values fit their fields (NULL: none given). */
static int values_ok(const struct nfc_table *t, const uint64_t *values)
{
    if (values != NULL)
        for (int i = 0, v = 0; i < t->nvalues; v += (int)nfc_words(t->value_width[i]), i++)
            if (!fits(values + v, t->value_width[i]))
                return NFC_E_OUT_OF_RANGE;
    return NFC_OK;
}

/* Check one record and pack its key; NFC_OK or NFC_E_OUT_OF_RANGE.  `values` may be NULL
 * (DELETE, READ). */
int nfc_entry_check(const struct nfc_table *t, const uint64_t *keys, const uint64_t *values, uint8_t *key)
{
    if (t->acl) {
        int st = nfc_acl_rule_key(t, keys, key);
        if (st != NFC_OK)
            return st;
        return values_ok(t, values);
    }
    memset(key, 0, t->key_bytes);
    unsigned off = 0, lpm_off = 0, n = 0;
    nfc_u128 addr = 0;
    for (int i = 0; i < t->nkeys; i++) {
        unsigned w = t->key_width[i];
        if (!fits(keys + n, w))
            return NFC_E_OUT_OF_RANGE;
        nfc_setw(key, off, w, nfc_from_words(keys + n, w));
        if (i == t->lpm) {
            lpm_off = off;
            addr = nfc_from_words(keys + n, w);
        }
        off += w;
        n += nfc_words(w);
    }
    if (t->lpm >= 0) {
        unsigned w = t->key_width[t->lpm];
        uint64_t plen = keys[n];
        if (plen > w)
            return NFC_E_OUT_OF_RANGE;
        nfc_u128 keep = plen == 0 ? 0 : ~nfc_maskw(w - (unsigned)plen);
        nfc_setw(key, lpm_off, w, addr & keep & nfc_maskw(w));
        nfc_set(key, off, 8, plen);
    }
    return values_ok(t, values);
}

static void plen_ref(struct nfc_table *t, const uint64_t *keys, int delta)
{
    if (t->lpm < 0)
        return;
    unsigned plen = (unsigned)keys[t->key_words];
    t->plen_count[plen] = (uint32_t)((int64_t)t->plen_count[plen] + delta);
    if (t->plen_count[plen] > 0)
        t->plens[plen >> 6] |= 1ull << (plen & 63);
    else
        t->plens[plen >> 6] &= ~(1ull << (plen & 63));
}

static void grace_period(void);

/* Control-plane table t in an rte_hash of capacity `cap`: the entries copied (the same data
 * words), the new one published, the old one freed after a grace period, so the lcores forward
 * on throughout.  0, or with nothing changed -1 (no memory) or -2 (a copy found the new table
 * full: its cuckoo paths ran out, which a bigger table may not).  Key positions change: nothing
 * may hold one of the old table (a delete not yet freed) across this. */
static int rebuild(struct nfc_table *t, uint32_t cap)
{
    struct rte_hash *old = t->h, *h = hash_new(t, (int)(t - nfc_tables), cap);
    if (h == NULL)
        return -1;
    const void *key;
    void *data;
    uint32_t next = 0;
    while (rte_hash_iterate(old, &key, &data, &next) >= 0)
        if (rte_hash_add_key_data(h, key, data) < 0) {
            rte_hash_free(h);
            return -2;
        }
    __atomic_store_n(&t->h, h, __ATOMIC_RELEASE);
    t->cap = cap;
    grace_period();
    rte_hash_free(old);
    return 0;
}

/* Table t rebuilt at capacity `cap`, or, where memory cannot give that, at half the headroom
 * above `need`, down to `need` alone (0, or -1 with nothing changed; a full table's next add
 * then doubles its buckets: regrow). */
static int grow(struct nfc_table *t, uint64_t cap, uint64_t need)
{
    if (need > UINT32_MAX || (t->no_room != 0 && need >= t->no_room))
        return -1;
    for (;;) {
        if (cap <= UINT32_MAX && (t->no_room == 0 || cap < t->no_room)) {
            int st = rebuild(t, (uint32_t)cap);
            if (st == 0)
                return 0;
            if (st == -2) /* a copy found no place: a smaller table finds none either */
                return -1;
            t->no_room = (uint32_t)cap;
        }
        if (cap == need)
            return -1;
        cap = need + (cap - need) / 2;
    }
}

/* Room for at least n entries in control-plane table t, kept below 7/8 full.  The capacity
 * grows NFC_GROW_BY times, but not past the room of the table's declared size while n is
 * within it (filled to its size, by ADDs or by the entries file, a table ends at
 * room_for(size): 1M entries take a capacity of 1.14M, not 4M); past its size (an estimate,
 * or this server's share of a split table, which a hash spreads only about evenly) by
 * 1/NFC_GROW_PAST_DIV of it, a geometric step still; and straight to what n needs when that is
 * more (a batch or an entries file sized in one step).  A capacity memory could
 * not give is remembered (t->no_room) and half the headroom above what n needs is tried, down
 * to that alone, so that a table at the edge of memory is neither copied once per add nor its
 * failing allocation tried again. */
static int reserve(struct nfc_table *t, uint64_t n)
{
    uint64_t need = room_for(n);
    if (t->state || need <= t->cap)
        return 0;
    uint64_t full = room_for(t->size);
    uint64_t cap = need <= full ? (uint64_t)t->cap * NFC_GROW_BY : (uint64_t)t->cap + t->cap / NFC_GROW_PAST_DIV;
    if (need <= full && cap > full)
        cap = full;
    return grow(t, cap < need ? need : cap, need);
}

/* Control-plane table t, whose rte_hash found no place for a key below 7/8 full (its cuckoo
 * paths ran out: rare), with twice the buckets: DPDK makes a table's buckets from the power of
 * two at or above its capacity, so one more than that power doubles them.  Not the fourfold
 * step past the declared size, which reserve would take at a table sized for it. */
static int regrow(struct nfc_table *t)
{
    uint64_t pow2 = 8;
    while (pow2 < t->cap)
        pow2 <<= 1;
    return grow(t, pow2 + 1, pow2 + 1);
}

int nfc_table_reserve(struct nfc_table *t, uint64_t n)
{
    return reserve(t, n);
}

/* Entry key := data in rte_hash and, for an LPM table, in its trie (first: it is the part
 * that can run out of memory; `fresh`: a new key, for which a full table grows if `may_grow`).
 * NFC_OK, or NFC_E_FULL / NFC_E_NO_MEMORY with nothing changed. */
static int put(struct nfc_table *t, const uint8_t *key, void *data, int fresh, int may_grow)
{
    if (t->lpm >= 0 && nfc_lpm_set(&t->trie, key, data, fresh) < 0)
        return NFC_E_NO_MEMORY;
    uint32_t count = (uint32_t)rte_hash_count(t->h);
    if (fresh && may_grow)
        reserve(t, (uint64_t)count + 1);
    int st = rte_hash_add_key_data(t->h, key, data); /* not grown: there may still be room */
    if (st == -ENOSPC && fresh && may_grow && regrow(t) == 0)
        st = rte_hash_add_key_data(t->h, key, data); /* full below 7/8 (cuckoo): twice the buckets */
    if (st >= 0)
        return NFC_OK;
    if (t->lpm >= 0) /* only a new key can find the table full */
        nfc_lpm_unset(&t->trie, key, t->h, t->plens);
    return NFC_E_FULL;
}

/* Entry key goes from rte_hash and, for an LPM table, from its trie; its rte_hash position
 * (to free after the grace period), or < 0: it was not there. */
static int32_t unput(struct nfc_table *t, const uint8_t *key)
{
    int32_t pos = rte_hash_del_key(t->h, key);
    if (pos >= 0 && t->lpm >= 0)
        nfc_lpm_unset(&t->trie, key, t->h, t->plens);
    return pos;
}

/* Every lcore has passed a quiescent state: what was replaced or unlinked before is unread. */
static void grace_period(void)
{
    rte_rcu_qsbr_synchronize(nfc_rcu, RTE_QSBR_THRID_INVALID);
    nfc_lpm_reclaim();
}

/* One entry, outside the forwarding loop (the entries file): add, or replace if `replace`. */
int nfc_entry_add(struct nfc_table *t, const uint64_t *keys, const uint64_t *values, int replace)
{
    uint8_t key[NFC_MAX_KEY];
    int st = nfc_entry_check(t, keys, values, key);
    if (st != NFC_OK)
        return st;
    void *old = NULL;
    int present = rte_hash_lookup_data(t->h, key, &old) >= 0;
    if (present && !replace)
        return NFC_E_EXISTS;
    if (t->state && !present && t->live >= t->cap)
        return NFC_E_FULL; /* h has room beyond cap, for the slots of removed entries */
    void *d = t->state ? nfc_state_loaded(t, keys, values) : nfc_data_new(t, values);
    if (d == NULL && !t->inline_values)
        return NFC_E_NO_MEMORY;
    if (!present)
        plen_ref(t, keys, +1);
    st = put(t, key, d, !present, 1);
    if (st != NFC_OK) {
        nfc_data_free(t, d);
        if (!present)
            plen_ref(t, keys, -1);
        return st;
    }
    if (t->state && !present)
        t->live++; /* before forwarding starts: no lcore writes t (a rejected line stops the server) */
    struct nfc_acl *gone = NULL;
    uint8_t *one[1] = {key};
    if (t->acl && nfc_acl_apply(t, present ? NFC_OP_MODIFY : NFC_OP_ADD, one, 1, &gone) != NFC_OK) {
        int32_t pos = -1;
        if (present)
            put(t, key, old, 0, 0);
        else
            pos = unput(t, key);
        grace_period();
        nfc_data_free(t, d);
        if (pos >= 0) /* the hash frees no key slot on delete (lock-free readers): after the grace period */
            rte_hash_free_key_with_position(t->h, pos);
        return NFC_E_NO_MEMORY;
    }
    if (present || gone != NULL) { /* nothing forwards yet, but keep to the rule: free after a grace period */
        grace_period();
        nfc_acl_free(gone);
        if (present)
            nfc_data_free(t, old);
    }
    return NFC_OK;
}

int nfc_entry_read(const struct nfc_table *t, const uint64_t *keys, uint64_t *values)
{
    uint8_t key[NFC_MAX_KEY];
    int st = nfc_entry_check(t, keys, NULL, key);
    if (st != NFC_OK)
        return st;
    void *d = NULL;
    if (rte_hash_lookup_data(t->h, key, &d) < 0)
        return NFC_E_NOT_FOUND;
    nfc_values_of(t, d, values);
    return NFC_OK;
}

/* ---- all-or-nothing batches (the control channel) ------------------------------------------ */

struct change {
    uint8_t key[NFC_MAX_KEY];
    const uint64_t *keys;
    void *data;        /* the new data (ADD, MODIFY) */
    void *old;         /* the data replaced or deleted */
    int32_t pos;       /* a deleted key's slot, freed after the grace period if freepos */
    int freepos;
    int applied;
};

static int cmp_key_bytes;
static int cmp_keys(const void *a, const void *b)
{
    return memcmp(((const struct change *)a)->key, ((const struct change *)b)->key, (size_t)cmp_key_bytes);
}

/* Undo the first n applied changes, newest first. */
static void undo(struct nfc_table *t, int op, struct change *c, uint32_t n)
{
    for (uint32_t i = n; i-- > 0;) {
        if (!c[i].applied)
            continue;
        if (op == NFC_OP_ADD) {
            c[i].pos = unput(t, c[i].key);
            c[i].freepos = c[i].pos >= 0;
            plen_ref(t, c[i].keys, -1);
        } else if (op == NFC_OP_MODIFY) {
            put(t, c[i].key, c[i].old, 0, 0);
            c[i].old = NULL;
        } else { /* DELETE: re-insert with the old data; the old slot is freed after the grace period */
            plen_ref(t, c[i].keys, +1);
            put(t, c[i].key, c[i].old, 1, 0); /* no growth: positions of this batch are held */
            c[i].old = NULL;
        }
    }
}

/* Apply `n` records of op ADD/MODIFY/DELETE to table t, all or nothing.  `rec` holds n
 * records of `stride` uint64_t; on error *bad is the record at fault. */
int nfc_batch(struct nfc_table *t, int op, const uint64_t *rec, uint32_t n, uint32_t stride, uint32_t *bad)
{
    int nk = t->key_words + t->arg_words;
    struct change *c = calloc(n ? n : 1, sizeof *c);
    if (c == NULL)
        return NFC_E_NO_MEMORY;
    int st = NFC_OK;
    /* 1. every record valid, no key twice, every key present (or absent for ADD) */
    for (uint32_t i = 0; i < n && st == NFC_OK; i++) {
        c[i].keys = rec + (size_t)i * stride;
        st = nfc_entry_check(t, c[i].keys, op == NFC_OP_DELETE ? NULL : c[i].keys + nk, c[i].key);
        if (st == NFC_OK) {
            int present = rte_hash_lookup_data(t->h, c[i].key, &c[i].old) >= 0;
            if (present && op == NFC_OP_ADD)
                st = NFC_E_EXISTS;
            else if (!present && op != NFC_OP_ADD)
                st = NFC_E_NOT_FOUND;
        }
        *bad = i;
    }
    if (st == NFC_OK && n > 1) {
        struct change *sorted = malloc((size_t)n * sizeof *sorted);
        if (sorted == NULL) {
            st = NFC_E_NO_MEMORY;
        } else {
            memcpy(sorted, c, (size_t)n * sizeof *sorted);
            cmp_key_bytes = t->key_bytes;
            qsort(sorted, n, sizeof *sorted, cmp_keys);
            for (uint32_t i = 1; i < n && st == NFC_OK; i++)
                if (memcmp(sorted[i - 1].key, sorted[i].key, t->key_bytes) == 0) {
                    st = NFC_E_DUPLICATE;
                    *bad = (uint32_t)(sorted[i].keys - rec) / stride;
                }
            free(sorted);
        }
    }
    /* 2. the new data */
    for (uint32_t i = 0; i < n && st == NFC_OK && op != NFC_OP_DELETE; i++) {
        c[i].data = nfc_data_new(t, c[i].keys + nk);
        if (c[i].data == NULL && !t->inline_values) {
            st = NFC_E_NO_MEMORY;
            *bad = i;
        }
    }
    /* 3. apply; only a full table can fail here, and then what was applied is undone (room
     * for the whole batch first: one copy of the table, not one per growth step) */
    if (st == NFC_OK && op == NFC_OP_ADD)
        reserve(t, (uint64_t)rte_hash_count(t->h) + n);
    uint32_t done = 0;
    for (; done < n && st == NFC_OK; done++) {
        struct change *x = &c[done];
        if (op == NFC_OP_DELETE) {
            x->pos = unput(t, x->key);
            x->freepos = x->pos >= 0;
            plen_ref(t, x->keys, -1);
        } else {
            if (op == NFC_OP_ADD)
                plen_ref(t, x->keys, +1);
            st = put(t, x->key, x->data, op == NFC_OP_ADD, 1);
            if (st != NFC_OK) {
                if (op == NFC_OP_ADD)
                    plen_ref(t, x->keys, -1);
                *bad = done;
                break;
            }
        }
        x->applied = 1;
    }
    /* 4. an ACL table: a classifier of its rules now (what fails to build undoes the batch) */
    struct nfc_acl *gone = NULL;
    if (st == NFC_OK && t->acl) {
        uint8_t **keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
        for (uint32_t i = 0; keys != NULL && i < n; i++)
            keys[i] = c[i].key;
        st = keys == NULL ? NFC_E_NO_MEMORY : nfc_acl_apply(t, op, keys, n, &gone);
        free(keys);
        *bad = 0;
    }
    if (st != NFC_OK)
        undo(t, op, c, done);
    /* 5. after one grace period nothing reads what was replaced or deleted */
    grace_period();
    nfc_acl_free(gone);
    for (uint32_t i = 0; i < n; i++) {
        if (st != NFC_OK)
            nfc_data_free(t, c[i].data); /* never visible, or undone; the old data (if any) is live again */
        else if (op != NFC_OP_ADD)
            nfc_data_free(t, c[i].old);
        if (c[i].freepos)
            rte_hash_free_key_with_position(t->h, c[i].pos);
    }
    if (st == NFC_OK)
        *bad = n;
    free(c);
    return st;
}
