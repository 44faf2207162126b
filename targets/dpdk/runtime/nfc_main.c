/* nfc server runtime: EAL and port set-up, the run-to-completion loop on every lcore,
 * entries loading, the control channel, counters.  Hand-written; the per-NF processing is
 * in the generated nf.c.
 *
 * usage: nf <EAL args> -- [--entries FILE] [--control SOCKET] [--live] [--idle-ms N] [--ports L0,L1,...]
 *                         [--tagged] [--wait] [--attach VDEV,ARGS]... [--control-group NAME]
 *                         [--control-allow-uid UID]... [--control-timeout-ms N]
 * Every EAL lcore (-l) forwards, run to completion: lcore k polls queue k of every port.
 * Behind a switch: one port, the switch-facing NIC (e.g. --vdev=net_pcap0,rx_pcap=in.pcap,
 * tx_pcap=out.pcap); packets go back where they came from.  Software-only programs
 * (nfc_software): DPDK port i is the NF's logical port L_i (--ports, default i); a packet
 * leaves by the DPDK port of its logical egress port (none: dropped as "server_no_port").  --tagged
 * (software-only programs; nfc run's stand-in for one NIC per logical port): one DPDK port
 * carries every logical port, each frame prefixed by its port as 4 bytes big-endian, the
 * ingress port on receive and the egress port on send; order is kept.
 * Without --live, the first empty burst after traffic means end of input (pcap files have no
 * end-of-file signal, dpdk-here.md) and --idle-ms (default 3000) without any packet stops
 * it; with --live it runs until SIGINT/SIGTERM.  --control serves the control channel
 * (nfc_ctl.h) on a UNIX socket; the --control-* flags say who may use it and how long a
 * client may take (nfc_control_arg, docs/control.md).  --wait holds forwarding until the
 * control channel's START (entries are loaded first); --attach hot-plugs a virtual device
 * then (e.g. a net_pcap whose input file is written after the entries are in).  The counters are printed as one JSON
 * line on exit. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include "nfc_burst.h"
#include "nfc_ctl.h"
#include "nfc_esp.h"
#include "nfc_rt.h"

#define BURST NFC_BURST
#define MAX_PORTS 16

struct nfc_stats nfc_stats[RTE_MAX_LCORE];
static volatile sig_atomic_t quit;
static uint32_t logical[MAX_PORTS];
static uint16_t nports;
static int live;
static int tagged; /* --tagged: every frame carries its logical port in NFC_TAG bytes before it */
#define NFC_TAG 4
static uint64_t idle_ms = 3000;
static struct rte_mempool *pool;
static struct rte_mempool *jumbo; /* frames over one mbuf of `pool` (nfc_burst.h), 9.5 KiB each */
volatile int nfc_started = 1; /* --wait: 0 until the control channel's START */

static void on_signal(int sig)
{
    (void)sig;
    quit = 1;
}

/* The DPDK port of each logical port below PORT_MAP, plus one (0: none), filled by start_ports:
 * one load a packet where searching logical[] was a compare per port (bench_instructions.py
 * --program l3fwd, two ports: the burst's instructions a packet 307.0 -> 298.9). */
#define PORT_MAP 1024
static uint8_t port_of[PORT_MAP];
_Static_assert(MAX_PORTS < 256, "port_of holds a DPDK port + 1 in a byte");

static int out_port(uint16_t in_port, const struct nfc_pkt *p)
{
    if (!nfc_software || tagged)
        return in_port;
    if (p->egress < PORT_MAP)
        return (int)port_of[p->egress] - 1;
    for (uint16_t i = 0; i < nports; i++)
        if (logical[i] == p->egress)
            return i;
    return -1;
}

/* --tagged: strip the logical ingress port from in[0..n) (a frame too short for it is freed and
 * counted as server_no_buffer: only a broken writer sends one); returns how many remain. */
static uint16_t untag(struct rte_mbuf **in, uint16_t n, uint32_t *port, struct nfc_stats *st)
{
    uint16_t k = 0;
    for (uint16_t i = 0; i < n; i++) {
        const uint8_t *b = rte_pktmbuf_mtod(in[i], const uint8_t *);
        if (rte_pktmbuf_data_len(in[i]) < NFC_TAG) {
            rte_pktmbuf_free(in[i]);
            st->drops[0]++;
            continue;
        }
        port[k] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        rte_pktmbuf_adj(in[i], NFC_TAG);
        in[k++] = in[i];
    }
    return k;
}

/* --tagged: prefix a sent frame with its logical egress port (no headroom: dropped). */
static struct rte_mbuf *tag(struct rte_mbuf *m, const struct nfc_pkt *p, struct nfc_stats *st)
{
    uint8_t *b = (uint8_t *)rte_pktmbuf_prepend(m, NFC_TAG);
    if (b == NULL) {
        rte_pktmbuf_free(m);
        st->forwarded--;
        st->drops[0]++;
        return NULL;
    }
    b[0] = (uint8_t)(p->egress >> 24);
    b[1] = (uint8_t)(p->egress >> 16);
    b[2] = (uint8_t)(p->egress >> 8);
    b[3] = (uint8_t)p->egress;
    return m;
}

/* One received burst: runs of packets from the same logical port go through nfc_burst
 * together (with --tagged each packet names its own); the outputs are queued per port, and
 * the ports given any are returned (bit per port; nout[] of the others is left as it was). */
static uint32_t process(struct rte_mbuf **in, uint16_t n, uint16_t port, struct nfc_pkt *pkt, uint8_t *scratch,
                        struct rte_mbuf *out[][NFC_BURST], uint16_t *nout)
{
    struct rte_mbuf *done[NFC_BURST];
    int to[NFC_BURST];
    uint32_t from[NFC_BURST];
    if (tagged)
        n = untag(in, n, from, pkt[0].stats);
    for (uint16_t start = 0, end; start < n; start = end) {
        uint32_t logical_in = tagged ? from[start] : logical[port];
        for (end = start + 1; tagged && end < n && from[end] == logical_in;)
            end++;
        if (!tagged)
            end = n;
        nfc_burst(in + start, (uint16_t)(end - start), port, logical_in, pkt + start, scratch, pool, jumbo, out_port,
                  done + start, to + start);
    }
    /* the count of the port a run of outputs goes to is kept in a register, not loaded and
     * stored back per packet (each store waited for by the next packet's load) */
    uint32_t used = 0;
    int q = -1;
    uint16_t k = 0;
    for (uint16_t i = 0; i < n; i++) {
        struct rte_mbuf *m = done[i];
        if (m != NULL && tagged)
            m = tag(m, &pkt[i], pkt[0].stats);
        if (m == NULL)
            continue;
        if (to[i] != q) {
            if (q >= 0)
                nout[q] = k;
            q = to[i];
            k = (used >> q) & 1 ? nout[q] : 0;
            used |= 1u << q;
        }
        out[q][k++] = m;
    }
    if (q >= 0)
        nout[q] = k;
    return used;
}

/* The run-to-completion loop of one lcore, on its queue of every port (nfc_burst.h does
 * the processing of each burst). */
/* A forwarding lcore's packet records (each counting into the lcore's counters) and output
 * scratch; *queue: its rx/tx queue on every port. */
static struct nfc_pkt *lcore_setup(unsigned lcore, uint16_t *queue, uint8_t **scratch)
{
    static struct nfc_pkt pkts[RTE_MAX_LCORE][BURST];
    static uint8_t outs[RTE_MAX_LCORE][NFC_MAX_PKT];
    *queue = (uint16_t)rte_lcore_index((int)lcore);
    *scratch = outs[lcore];
    for (int i = 0; i < BURST; i++)
        pkts[lcore][i].stats = &nfc_stats[lcore];
    return pkts[lcore];
}

static int forward(void *arg)
{
    (void)arg;
    unsigned lcore = rte_lcore_id();
    uint16_t queue;
    uint8_t *scratch;
    struct nfc_pkt *pkt = lcore_setup(lcore, &queue, &scratch);
    uint64_t hz = rte_get_timer_hz(), last = rte_get_timer_cycles(), seen = 0;
    struct rte_mbuf *in[BURST], *out[MAX_PORTS][BURST];
    uint16_t nout[MAX_PORTS];
    nfc_rcu_online(lcore);
    while (!quit) {
        uint32_t got = 0;
        for (uint16_t port = 0; port < nports; port++) {
            uint16_t n = rte_eth_rx_burst(port, queue, in, BURST);
            if (n == 0)
                continue;
            got += n;
            for (uint32_t used = process(in, n, port, pkt, scratch, out, nout); used != 0; used &= used - 1) {
                uint16_t q = (uint16_t)__builtin_ctz(used), sent = 0;
                /* a queue that takes nothing for 1 ms is given up on: the frames left are
                 * dropped (server_no_buffer), so the lcore reaches its quiescent point and
                 * the control thread's writes (RCU) are never held up by a stuck port; the
                 * clock is read only once a queue takes nothing */
                uint64_t give_up = 0;
                while (sent < nout[q] && !quit) {
                    uint16_t k = rte_eth_tx_burst(q, queue, out[q] + sent, (uint16_t)(nout[q] - sent));
                    sent += k;
                    if (k > 0) {
                        give_up = 0;
                        continue;
                    }
                    uint64_t now = rte_get_timer_cycles();
                    if (give_up == 0)
                        give_up = now + hz / 1000;
                    else if (now > give_up)
                        break;
                }
                for (uint16_t i = sent; i < nout[q]; i++) {
                    rte_pktmbuf_free(out[q][i]);
                    nfc_stats[lcore].forwarded--;
                    nfc_stats[lcore].drops[0]++;
                }
            }
        }
        nfc_rcu_quiescent(lcore); /* nothing of the tables is held across bursts */
        if (got > 0) {
            seen += got;
            if (!live)
                last = rte_get_timer_cycles();
        } else if (!live && (seen > 0 || rte_get_timer_cycles() - last > hz * idle_ms / 1000)) {
            break;
        }
    }
    nfc_rcu_offline(lcore);
    return 0;
}

static int start_ports(uint16_t queues)
{
    nports = rte_eth_dev_count_avail() < MAX_PORTS ? (uint16_t)rte_eth_dev_count_avail() : MAX_PORTS;
    for (uint16_t port = 0; port < nports; port++) {
        struct rte_eth_conf conf;
        struct rte_eth_dev_info info;
        memset(&conf, 0, sizeof conf);
        if (rte_eth_dev_info_get(port, &info) != 0 || info.max_rx_queues < queues || info.max_tx_queues < queues) {
            fprintf(stderr, "nfc: port %u has fewer than %u queues: use fewer lcores (-l)\n", port, queues);
            return 1;
        }
        int sock = rte_eth_dev_socket_id(port);
        unsigned socket = (unsigned)(sock < 0 ? 0 : sock);
        if (logical[port] == 0 && port > 0)
            logical[port] = port;
        if (logical[port] < PORT_MAP && port_of[logical[port]] == 0) /* the first port of a logical port takes it */
            port_of[logical[port]] = (uint8_t)(port + 1);
        int ok = rte_eth_dev_configure(port, queues, queues, &conf) == 0;
        for (uint16_t q = 0; ok && q < queues; q++)
            ok = rte_eth_rx_queue_setup(port, q, 1024, socket, NULL, pool) == 0 &&
                 rte_eth_tx_queue_setup(port, q, 1024, socket, NULL) == 0;
        if (!ok || rte_eth_dev_start(port) != 0) {
            fprintf(stderr, "nfc: cannot start port %u\n", port);
            return 1;
        }
    }
    return 0;
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
    const char *entries = NULL, *attach[MAX_PORTS];
    int nattach = 0;
    for (int i = 1; i < argc; i++) {
        int more = i + 1 < argc, taken = nfc_control_arg(argc - i, argv + i);
        if (taken < 0)
            return 2;
        if (taken > 0) {
            i += taken - 1;
        } else if (strcmp(argv[i], "--live") == 0) {
            live = 1;
        } else if (strcmp(argv[i], "--tagged") == 0) {
            tagged = 1;
        } else if (strcmp(argv[i], "--wait") == 0) {
            nfc_started = 0;
        } else if (more && strcmp(argv[i], "--attach") == 0 && nattach < MAX_PORTS) {
            attach[nattach++] = argv[++i];
        } else if (more && strcmp(argv[i], "--entries") == 0) {
            entries = argv[++i];
        } else if (more && strcmp(argv[i], "--idle-ms") == 0) {
            idle_ms = strtoull(argv[++i], NULL, 10);
        } else if (more && strcmp(argv[i], "--ports") == 0) {
            char *save = NULL, *list = argv[++i];
            uint16_t k = 0;
            for (char *t = strtok_r(list, ",", &save); t != NULL && k < MAX_PORTS; t = strtok_r(NULL, ",", &save))
                logical[k++] = (uint32_t)strtoul(t, NULL, 10);
        } else {
            fprintf(stderr, "nfc: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (tagged && !nfc_software) {
        fprintf(stderr, "nfc: --tagged is for a program without a switch (built with a server target alone)\n");
        return 2;
    }
    uint16_t lcores = (uint16_t)rte_lcore_count();
    if (nfc_register_writes && lcores > 1) { /* e.g. a sequence number read, incremented and written back */
        fprintf(stderr, "nfc: this program writes registers, which is not atomic across lcores: run it on one "
                        "forwarding lcore (-l N)\n");
        return 2;
    }
    if (nfc_tables_init() != 0 || (entries != NULL && nfc_load_entries(entries) < 0) ||
        (nfc_uses_esp && nfc_esp_init() != 0))
        return 1;
    /* from here a signal ends forwarding cleanly; before, it ends a long load at once */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (nfc_control_start() != 0)
        return 1;
    while (!nfc_started && !quit)
        rte_delay_us_sleep(1000);
    for (int i = 0; i < nattach; i++) {
        char name[64];
        const char *comma = strchr(attach[i], ',');
        size_t n = comma != NULL ? (size_t)(comma - attach[i]) : strlen(attach[i]);
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), attach[i]);
        if (rte_eal_hotplug_add("vdev", name, comma != NULL ? comma + 1 : "") != 0) {
            fprintf(stderr, "nfc: cannot attach %s\n", attach[i]);
            nfc_control_stop();
            return 1;
        }
    }
    if (rte_eth_dev_count_avail() < 1)
        fprintf(stderr, "nfc: no port (check the --vdev arguments and input files)\n");
    else if ((pool = nfc_mbuf_pool("nfc_mbufs", 8191 * lcores, 256, RTE_MBUF_DEFAULT_BUF_SIZE,
                                   (int)rte_socket_id())) == NULL ||
             (jumbo = nfc_mbuf_pool("nfc_jumbo", 511 * lcores, 32, NFC_MBUF_ROOM, (int)rte_socket_id())) == NULL)
        fprintf(stderr, "nfc: cannot create the mbuf pools: %s\n", rte_strerror(rte_errno));
    if (jumbo == NULL || start_ports(lcores) != 0) {
        nfc_control_stop();
        return 1;
    }
    rte_eal_mp_remote_launch(forward, NULL, CALL_MAIN);
    rte_eal_mp_wait_lcore();
    nfc_control_stop();
    for (uint16_t port = 0; port < nports; port++) {
        rte_eth_dev_stop(port);
        rte_eth_dev_close(port);
    }
    static char counters[1 << 16];
    nfc_counters_json(counters, sizeof counters);
    printf("%s\n", counters);
    fflush(stdout);
    if (nfc_uses_esp)
        nfc_esp_stop();
    rte_eal_cleanup();
    return 0;
}
