/* The CGN's port pools and the state that holds their ports (targets/dpdk/runtime/nfc_state.c),
 * on the real clock, for tests/test_port_pools.py (built under ASan + UBSan).
 *
 *   ports_check   (EAL arguments before "--")
 *
 * Each step prints "step NAME PORT..." with the ports alloc_port gave; the test compares them
 * with the reference semantics (compiler/interp/state.py) it states itself.  Timeouts are tens of
 * milliseconds: a step that sleeps past one sleeps twice as long as the timeout, and a step that
 * must not see an expiry refreshes at a fifth of it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <rte_eal.h>
#include <rte_lcore.h>

#include "nfc_rt.h"

#define MS 1000000ull
#define ADDR_A 0xC6336401ull
#define ADDR_B 0xC6336402ull
#define ADDR_C 0xC6336403ull

/* what nfc_tables.c and nfc_rt.h expect of a generated program: the state that holds ports,
 * keyed (address, port) as the CGN's nat_in is (less its protocol); and one whose key has a
 * 128-bit field (two words of an entries-file line's keys) before the address and the port */
struct nfc_table nfc_tables[2] = {
    {.name = "nat_in", .src = "ports_check.c", .size = 1 << 17, .nkeys = 2, .nvalues = 1, .lpm = -1, .state = 1,
     .key_bytes = 8, .key_width = {32, 16}, .value_width = {32}, .timeout_ns = 1000000000ull,
     .holds_ports = 1, .held_key = {0, 1}},
    {.name = "wide", .src = "ports_check.c", .size = 1024, .nkeys = 3, .nvalues = 1, .lpm = -1, .state = 1,
     .key_bytes = 24, .key_width = {128, 32, 16}, .value_width = {32}, .timeout_ns = 1000000000ull,
     .holds_ports = 1, .held_key = {1, 2}},
};
const int nfc_ntables = 2;
const char nfc_program[] = "ports_check";
struct nfc_stats nfc_stats[RTE_MAX_LCORE];

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void key_of(uint8_t key[8], uint64_t addr, uint64_t port)
{
    nfc_set64(key, (addr & 0xffffffffull) << 32 | (port & 0xffff) << 16);
}

/* a mapping: the entry of (addr, port) holds the port for timeout_ms */
static int hold(uint64_t addr, uint64_t port, uint64_t timeout_ms)
{
    uint8_t key[8];
    uint64_t v[1] = {addr};
    key_of(key, addr, port);
    return nfc_state_insert_held(&nfc_tables[0], key, v, timeout_ms * MS, addr, port);
}

/* what a lookup hit with refresh (or `refresh nat_in;`) does: 1 if the entry was live */
static int refresh(uint64_t addr, uint64_t port)
{
    uint8_t key[8];
    void *data;
    key_of(key, addr, port);
    if (!nfc_state_find(&nfc_tables[0], key, &data))
        return 0;
    nfc_state_touch_held(data, nfc_tables[0].nvalues);
    return 1;
}

int main(int argc, char **argv)
{
    if (rte_eal_init(argc, argv) < 0 || nfc_tables_init() != 0)
        return 2;
    unsigned lcore = rte_lcore_id();
    nfc_rcu_online(lcore);

    /* given out, held by an entry for 20 ms, free again after it expired; the port given out
     * and never held by an entry stays taken */
    uint64_t a0 = nfc_alloc_port(ADDR_A);
    int held = hold(ADDR_A, a0, 20);
    uint64_t a1 = nfc_alloc_port(ADDR_A);
    sleep_ms(40);
    uint64_t a2 = nfc_alloc_port(ADDR_A);
    printf("step expire %" PRIu64 " %" PRIu64 " %" PRIu64 " %d\n", a0, a1, a2, held);

    /* a refreshed entry keeps its port: refreshed every 8 ms for 120 ms (timeout 40 ms) */
    hold(ADDR_A, a2, 40);
    uint64_t during = 0, live = 1;
    for (int i = 0; i < 15; i++) {
        sleep_ms(8);
        live &= (uint64_t)refresh(ADDR_A, a2);
        uint64_t p = nfc_alloc_port(ADDR_A);
        during += p == a2;
    }
    sleep_ms(80);
    uint64_t after = nfc_alloc_port(ADDR_A);
    printf("step refresh %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", live, during, after);

    /* a pool given out whole: 64512 distinct ports in order, then 0; a port in the middle taken
     * by an entry for 10 ms (its block's bound lowered) is given out again once it expired */
    uint64_t next = 1024, in_order = 1;
    for (uint64_t i = 0; i < 64512; i++)
        in_order &= nfc_alloc_port(ADDR_B) == next++;
    uint64_t full = nfc_alloc_port(ADDR_B);
    hold(ADDR_B, 40000, 10);
    uint64_t still = nfc_alloc_port(ADDR_B);
    sleep_ms(30);
    uint64_t back = nfc_alloc_port(ADDR_B);
    uint64_t none = nfc_alloc_port(ADDR_B);
    printf("step full %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", in_order, full, still, back,
           none);

    /* an entry the entries file loads holds the port its key names, until it expires (1 s):
     * the lowest free port of the address is the next one */
    uint64_t keys[4] = {0x20010db800000000ull, 7, ADDR_C, 1024}, v[1] = {1};
    void *loaded = nfc_state_loaded(&nfc_tables[1], keys, v);
    uint64_t beside = nfc_alloc_port(ADDR_C);
    printf("step loaded %d %" PRIu64 "\n", loaded != NULL, beside);
    free(loaded);

    /* 300 addresses, each its own pool */
    uint64_t own = 0;
    for (uint64_t i = 0; i < 300; i++)
        own += nfc_alloc_port(0x0A000000ull + i) == 1024;
    printf("step addresses %" PRIu64 "\n", own);

    nfc_rcu_offline(lcore);
    nfc_state_reclaim(lcore, 1);
    rte_eal_cleanup();
    return 0;
}
