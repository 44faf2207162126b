/* nfc server runtime: data-plane state (tables the stages insert into, the CGN's port pools)
 * shared by every forwarding lcore (issue 13, "state on every core").
 *
 * A state table is a lock-free rte_hash (RW_CONCURRENCY_LF): lookups take no lock, so a
 * flow's packets may come in on any lcore.  Its writers (insert, the removal of an expired
 * entry by the packet that finds it, and an insert's sweep of a full table: nfc_state.c) are
 * the forwarding lcores, one at a time under the table's spinlock; a record (the values, then the expiry and the timeout in ns) is
 * never changed once published except for its expiry, a single word, so a reader sees whole
 * values.  An insert publishes a new record; the record it replaces, or the record and key
 * slot of a removed entry, are freed once every lcore has passed a quiescent state (the
 * retiring lcore frees them itself between bursts, nfc_state_reclaim: it never waits).
 *
 * Included by nfc_rt.h after its table declarations.  Hand-written, shared by every
 * generated program. */
#ifndef NFC_STATE_H
#define NFC_STATE_H

#include <stdint.h>

/* Record v of a state table of n values: v[n] the expiry, v[n + 1] the timeout (ns); in the
 * state that holds alloc_port's ports (`holds_ports`), v[n + 2] the port's slot in its pool,
 * which holds the port until the same expiry; then a switch-cached state's links (below).
 *
 * A switch-cached state's entry may be *pinned* (t->pins, the cache manager's PIN): the switch
 * holds a copy of it, so it does not expire on the server (a lookup finds it live whatever its
 * timer says, and the port it holds stays held) until the manager has taken it off the switch
 * and unpinned it.  Its timer still runs: switch hits reach it as TOUCH, and the manager
 * evicts the pinned entries whose timer has run out (OVERDUE).
 *
 * Links: a hit of a switch-cached state on the server records, per `refresh` statement of the
 * lookup's hit arm, the key that statement refreshed (link j: v[t->link_off[j]] a sequence,
 * 0 never written and odd while being written, then the key's bytes), so that a hit on the
 * switch, which refreshes nothing on the server, is replayed as the same refreshes (TOUCH).
 * The key is the one of the entry's last hit on the server: seed 002's CGN refreshes the
 * mapping's other half, whose key the entry determines. */
/* The bytes of every record of state table t, whoever makes it (an lcore's insert, or the
 * entries file's line: nfc_state_loaded): the values, the expiry, the timeout, the port slot
 * and the links, in whole 64-byte lines (lcores refreshing the expiries of different flows
 * never write one line). */
static inline size_t nfc_state_rec_bytes(const struct nfc_table *t)
{
    return (((size_t)t->value_words + 3 + t->link_words) * sizeof(uint64_t) + 63) & ~(size_t)63;
}

/* Record v of state table t := values, expiring timeout_ns after now, holding the port whose
 * time is `slot` (or none: NULL), no link yet: how every record starts, an lcore's insert or an
 * entry the entries file loads (nfc_state.c). */
static inline void nfc_state_rec_init(const struct nfc_table *t, uint64_t *v, const uint64_t *values,
                                      uint64_t timeout_ns, uint64_t *slot)
{
    unsigned n = t->value_words;
    memcpy(v, values, n * sizeof *v);
    memset(v + n + 3, 0, t->link_words * sizeof *v);
    v[n + 2] = (uintptr_t)slot;
    v[n + 1] = timeout_ns;
    v[n] = nfc_now_ns() + timeout_ns;
}

/* Key slots of state table t's rte_hash: its cap entries, and room for those of removed entries
 * until their grace period has passed (nfc_state.c: a full table's insert removes expired entries
 * and takes a slot at once). */
static inline uint32_t nfc_state_slots(const struct nfc_table *t)
{
    return t->cap + t->cap / NFC_STATE_ROOM_DIV + NFC_STATE_ROOM_ADD;
}

static inline uint64_t nfc_state_expiry(const uint64_t *v, unsigned n)
{
    return __atomic_load_n(&v[n], __ATOMIC_RELAXED);
}

/* A hit restarts the entry's idle timer. */
static inline void nfc_state_touch(uint64_t *v, unsigned n)
{
    __atomic_store_n(&v[n], nfc_now_ns() + v[n + 1], __ATOMIC_RELAXED);
}

/* A port's time raised to `until`, unless it is held for ever (UINT64_MAX: given out, or its
 * holder pinned). */
static inline void nfc_hold_until(uint64_t *slot, uint64_t until)
{
    uint64_t old = __atomic_load_n(slot, __ATOMIC_RELAXED);
    while (old != UINT64_MAX && old < until &&
           !__atomic_compare_exchange_n(slot, &old, until, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* The same for an entry that holds a port: the port is held as long. */
static inline void nfc_state_touch_held(uint64_t *v, unsigned n)
{
    uint64_t until = nfc_now_ns() + v[n + 1];
    __atomic_store_n(&v[n], until, __ATOMIC_RELAXED);
    nfc_hold_until((uint64_t *)(uintptr_t)v[n + 2], until);
}

/* Link j of record v of switch-cached state t := key (the key a `refresh` of its hit arm
 * found), written only when it changed; one lcore at a time (another writing: left to it). */
static inline void nfc_state_link(const struct nfc_table *t, uint64_t *v, unsigned j, const uint8_t *key)
{
    uint64_t *w = &v[t->link_off[j]];
    unsigned bytes = nfc_tables[t->link_table[j]].key_bytes;
    uint64_t seq = __atomic_load_n(w, __ATOMIC_ACQUIRE);
    if ((seq & 1) || (seq != 0 && memcmp(w + 1, key, bytes) == 0))
        return;
    if (!__atomic_compare_exchange_n(w, &seq, seq + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    __atomic_thread_fence(__ATOMIC_RELEASE); /* the odd sequence before the key's bytes */
    memcpy(w + 1, key, bytes);
    __atomic_store_n(w, seq + 2, __ATOMIC_RELEASE);
}

/* An expired entry that a lookup found (rec its record): removed if it is still there and not
 * pinned (out of line).  1: it is pinned, so live; 0: gone. */
int nfc_state_expire(struct nfc_table *t, const uint8_t *key, const void *rec);

/* Lookup of state table t; 1 and *data: the live entry's record.  An expired entry misses
 * and is removed. */
static inline int nfc_state_find(struct nfc_table *t, const uint8_t *key, void **data)
{
    if (rte_hash_lookup_data(t->h, key, data) < 0)
        return 0;
    if (nfc_state_expiry((const uint64_t *)*data, t->value_words) > nfc_now_ns())
        return 1;
    return nfc_state_expire(t, key, *data); /* pinned (on the switch): live until the manager unpins it */
}

/* Entry key := the table's value_words `values`, expiring timeout_ns after now (a new record; a
 * record it replaces is retired).  0; -1: no memory for the record.  A new key in a full table
 * first sweeps expired entries (nfc_state.c); if it is still full the insert is lost, as the
 * reference's is. */
int nfc_state_insert(struct nfc_table *t, const uint8_t *key, const uint64_t *values, uint64_t timeout_ns);

/* nfc_state_insert into the state that holds ports: the entry holds port `port` of address
 * `addr` until it expires (then alloc_port may give the port out again). */
int nfc_state_insert_held(struct nfc_table *t, const uint8_t *key, const uint64_t *values, uint64_t timeout_ns,
                          uint64_t addr, uint64_t port);

/* The record of an entry the entries file loads into state table t (keys: its key fields'
 * values, as nfc_entry_add takes them), before forwarding starts: values, the table's timeout
 * from now, and in the state that holds ports the port its key names, held until it expires as
 * an insert's is (so alloc_port does not give it to another flow); NULL: no memory. */
void *nfc_state_loaded(struct nfc_table *t, const uint64_t *keys, const uint64_t *values);

/* The lowest port >= 1024 of external address ext_ip that nothing holds (given out by an
 * earlier call and held for ever, unless an entry of the state that holds ports took it and
 * has expired since; the reference semantics, compiler/interp/state.py); 0 when its 64512
 * ports are held or memory runs out. */
uint64_t nfc_alloc_port(uint64_t ext_ip);

/* The cache manager's side (the control thread, NFC_OP_PIN .. NFC_OP_OVERDUE; nfc_ctl.h).
 * Pin the live entry of key (with the entries its links name, so that a mapping's other half
 * does not expire while the switch translates with this one) and copy its values to out: 1;
 * 2: it was pinned already (a pin is a flag: nothing changed); 0: no live entry, or one whose
 * links no server hit has noted yet; -1: no memory. */
int nfc_state_pin(struct nfc_table *t, const uint8_t *key, uint64_t *out);
/* Undo one pin of key (and of the entries it pinned through its links): 0; -1: not pinned. */
int nfc_state_unpin(struct nfc_table *t, const uint8_t *key);
/* A switch hit of key at hit_ns (no later than now): what a hit on the server does to the
 * timers (the entry's own if the table refreshes on a hit, and its links'), taken back to
 * hit_ns; an entry expired and not pinned is left alone.  1: found; 0: not. */
int nfc_state_touch_at(struct nfc_table *t, const uint8_t *key, uint64_t hit_ns);
/* The keys (as nfc_key_fields gives them) of up to max pinned entries whose timers have run
 * out, into out; how many. */
uint32_t nfc_state_overdue(struct nfc_table *t, uint64_t *out, uint32_t max);

/* Free what lcore retired, as far as every lcore has passed a quiescent state since; with
 * `wait` (an lcore that went offline), everything, waiting for the others. */
void nfc_state_reclaim(unsigned lcore, int wait);

#endif
