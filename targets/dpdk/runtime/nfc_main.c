/* nfc server runtime: EAL and port set-up, the run-to-completion loop, entries loading,
 * counters.  Hand-written; the per-NF processing is in the generated nf.c.
 *
 * usage: nf <EAL args> -- [--entries FILE] [--idle-ms N] [--ports L0,L1,...]
 * Behind a switch: one port, the switch-facing NIC (e.g. --vdev=net_pcap0,rx_pcap=in.pcap,
 * tx_pcap=out.pcap); packets go back where they came from.  Software-only programs
 * (nfc_software): DPDK port i is the NF's logical port L_i (--ports, default i); a packet
 * leaves by the DPDK port of its logical egress port (none: dropped as "no_port").
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
#define MAX_PORTS 16

static volatile sig_atomic_t quit;
static uint64_t drops[256];
static uint64_t no_port;
static uint64_t forwarded;
static uint32_t logical[MAX_PORTS];
static uint16_t nports;

static void on_signal(int sig)
{
    (void)sig;
    quit = 1;
}

static int out_port(uint16_t in_port, const struct nfc_pkt *p)
{
    if (!nfc_software)
        return in_port;
    for (uint16_t i = 0; i < nports; i++)
        if (logical[i] == p->egress)
            return i;
    return -1;
}

static struct rte_mbuf *process(struct rte_mbuf *m, struct rte_mempool *pool, uint16_t in_port, int *to)
{
    static struct nfc_pkt pkt;
    static uint8_t out[NFC_MAX_PKT];
    if (m->nb_segs != 1) {
        rte_pktmbuf_free(m);
        drops[0]++;
        return NULL;
    }
    const uint8_t *data = rte_pktmbuf_mtod(m, const uint8_t *);
    int code = nfc_from_switch(&pkt, data, rte_pktmbuf_data_len(m), logical[in_port]);
    if (code == NFC_CONTINUE)
        code = nfc_run(&pkt);
    struct rte_mbuf *o = NULL;
    *to = code == NFC_CONTINUE ? out_port(in_port, &pkt) : -1;
    if (code == NFC_CONTINUE && *to < 0) {
        no_port++;
    } else if (code == NFC_CONTINUE) {
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
    if (no_port)
        printf("%s\"no_port\": %" PRIu64, first ? "" : ", ", no_port);
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
        else if (strcmp(argv[i], "--ports") == 0) {
            char *save = NULL, *list = argv[i + 1];
            uint16_t k = 0;
            for (char *t = strtok_r(list, ",", &save); t != NULL && k < MAX_PORTS; t = strtok_r(NULL, ",", &save))
                logical[k++] = (uint32_t)strtoul(t, NULL, 10);
        }
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
    nports = rte_eth_dev_count_avail() < MAX_PORTS ? (uint16_t)rte_eth_dev_count_avail() : MAX_PORTS;
    for (uint16_t port = 0; port < nports; port++) {
        struct rte_eth_conf conf;
        memset(&conf, 0, sizeof conf);
        int sock = rte_eth_dev_socket_id(port);
        if (logical[port] == 0 && port > 0)
            logical[port] = port;
        if (rte_eth_dev_configure(port, 1, 1, &conf) != 0 ||
            rte_eth_rx_queue_setup(port, 0, 1024, (unsigned)(sock < 0 ? 0 : sock), NULL, pool) != 0 ||
            rte_eth_tx_queue_setup(port, 0, 1024, (unsigned)(sock < 0 ? 0 : sock), NULL) != 0 ||
            rte_eth_dev_start(port) != 0) {
            fprintf(stderr, "nfc: cannot start port %u\n", port);
            return 1;
        }
    }
    uint64_t hz = rte_get_timer_hz(), last = rte_get_timer_cycles(), seen = 0;
    struct rte_mbuf *in[BURST], *out[MAX_PORTS][BURST];
    uint16_t nout[MAX_PORTS];
    while (!quit) {
        uint32_t got = 0;
        for (uint16_t port = 0; port < nports; port++) {
            uint16_t n = rte_eth_rx_burst(port, 0, in, BURST);
            got += n;
            memset(nout, 0, sizeof nout);
            for (uint16_t i = 0; i < n; i++) {
                int to = -1;
                struct rte_mbuf *o = process(in[i], pool, port, &to);
                if (o != NULL)
                    out[to][nout[to]++] = o;
            }
            for (uint16_t q = 0; q < nports; q++) {
                uint16_t sent = 0;
                while (sent < nout[q] && !quit)
                    sent += rte_eth_tx_burst(q, 0, out[q] + sent, (uint16_t)(nout[q] - sent));
                for (uint16_t i = sent; i < nout[q]; i++)
                    rte_pktmbuf_free(out[q][i]);
            }
        }
        if (got == 0) {
            if (seen > 0 || rte_get_timer_cycles() - last > hz * idle_ms / 1000)
                break;
            continue;
        }
        seen += got;
        last = rte_get_timer_cycles();
    }
    for (uint16_t port = 0; port < nports; port++) {
        rte_eth_dev_stop(port);
        rte_eth_dev_close(port);
    }
    print_counters();
    rte_eal_cleanup();
    return 0;
}
