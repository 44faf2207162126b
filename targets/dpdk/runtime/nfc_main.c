/* nfc server runtime: EAL and port set-up, the run-to-completion loop, entries loading,
 * counters.  Hand-written; the per-NF processing is in the generated nf.c.
 *
 * usage: nf <EAL args> -- [--entries FILE] [--idle-ms N]
 * One port (the switch-facing NIC, e.g. --vdev=net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap).
 * With pcap input the first empty burst after traffic means end of file (dpdk-here.md);
 * otherwise it runs until SIGINT/SIGTERM or --idle-ms without a packet.  Counters are
 * printed as one JSON line on exit. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "nfc_rt.h"

#define BURST 32

static volatile sig_atomic_t quit;
static uint64_t drops[256];
static uint64_t forwarded;

static void on_signal(int sig)
{
    (void)sig;
    quit = 1;
}

static struct rte_mbuf *process(struct rte_mbuf *m, struct rte_mempool *pool)
{
    static struct nfc_pkt pkt;
    static uint8_t out[NFC_MAX_PKT];
    if (m->nb_segs != 1) {
        rte_pktmbuf_free(m);
        drops[0]++;
        return NULL;
    }
    const uint8_t *data = rte_pktmbuf_mtod(m, const uint8_t *);
    int code = nfc_from_switch(&pkt, data, rte_pktmbuf_data_len(m));
    if (code == NFC_CONTINUE)
        code = nfc_run(&pkt);
    struct rte_mbuf *o = NULL;
    if (code == NFC_CONTINUE) {
        uint32_t n = nfc_to_switch(&pkt, out, sizeof out);
        o = rte_pktmbuf_alloc(pool);
        char *dst = o != NULL ? rte_pktmbuf_append(o, (uint16_t)n) : NULL;
        if (dst != NULL) {
            memcpy(dst, out, n);
            forwarded++;
        } else {
            rte_pktmbuf_free(o);
            o = NULL;
            drops[0]++;
        }
    } else {
        drops[code & 0xff]++;
    }
    rte_pktmbuf_free(m);
    return o;
}

static void print_counters(void)
{
    printf("{\"forwarded\": %" PRIu64 ", \"drops\": {", forwarded);
    int first = 1;
    for (int i = 0; i < 256; i++) {
        if (drops[i] == 0)
            continue;
        printf("%s\"%s\": %" PRIu64, first ? "" : ", ", i == 0 ? "server_no_buffer" : nfc_reason(i), drops[i]);
        first = 0;
    }
    printf("}}\n");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int used = rte_eal_init(argc, argv);
    if (used < 0) {
        fprintf(stderr, "nfc: EAL initialisation failed\n");
        return 1;
    }
    argc -= used;
    argv += used;
    const char *entries = NULL;
    uint64_t idle_ms = 3000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--entries") == 0)
            entries = argv[i + 1];
        else if (strcmp(argv[i], "--idle-ms") == 0)
            idle_ms = strtoull(argv[i + 1], NULL, 10);
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (nfc_tables_init() != 0 || (entries != NULL && nfc_load_entries(entries) < 0))
        return 1;
    if (rte_eth_dev_count_avail() < 1) {
        fprintf(stderr, "nfc: no port (check the --vdev arguments and input files)\n");
        return 1;
    }
    struct rte_mempool *pool = rte_pktmbuf_pool_create("nfc_mbufs", 8191, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                                       (int)rte_socket_id());
    if (pool == NULL) {
        fprintf(stderr, "nfc: cannot create the mbuf pool: %s\n", rte_strerror(rte_errno));
        return 1;
    }
    uint16_t port = 0;
    struct rte_eth_conf conf;
    memset(&conf, 0, sizeof conf);
    int sock = rte_eth_dev_socket_id(port);
    if (rte_eth_dev_configure(port, 1, 1, &conf) != 0 ||
        rte_eth_rx_queue_setup(port, 0, 1024, (unsigned)(sock < 0 ? 0 : sock), NULL, pool) != 0 ||
        rte_eth_tx_queue_setup(port, 0, 1024, (unsigned)(sock < 0 ? 0 : sock), NULL) != 0 ||
        rte_eth_dev_start(port) != 0) {
        fprintf(stderr, "nfc: cannot start port %u\n", port);
        return 1;
    }
    uint64_t hz = rte_get_timer_hz(), last = rte_get_timer_cycles(), seen = 0;
    struct rte_mbuf *in[BURST], *out[BURST];
    while (!quit) {
        uint16_t n = rte_eth_rx_burst(port, 0, in, BURST);
        if (n == 0) {
            if (seen > 0 || rte_get_timer_cycles() - last > hz * idle_ms / 1000)
                break;
            continue;
        }
        seen += n;
        last = rte_get_timer_cycles();
        uint16_t k = 0;
        for (uint16_t i = 0; i < n; i++) {
            struct rte_mbuf *o = process(in[i], pool);
            if (o != NULL)
                out[k++] = o;
        }
        uint16_t sent = 0;
        while (sent < k && !quit)
            sent += rte_eth_tx_burst(port, 0, out + sent, (uint16_t)(k - sent));
        for (uint16_t i = sent; i < k; i++)
            rte_pktmbuf_free(out[i]);
    }
    rte_eth_dev_stop(port);
    rte_eth_dev_close(port);
    print_counters();
    rte_eal_cleanup();
    return 0;
}
