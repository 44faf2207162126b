/* bench/bench_specialised.py: the forwarding loop cut to l3fwd's, in place of nfc_main.c's
 * forward(): one rx port (0), every output in one tx_burst on port 1, no per-port queues and no
 * give-up clock (docs/server.md, "Would the specialised burst reach l3fwd?").  Only for the
 * benchmark's two ports. */
static int forward(void *arg)
{
    (void)arg;
    unsigned lcore = rte_lcore_id();
    uint16_t queue;
    uint8_t *scratch;
    struct nfc_pkt *pkt = lcore_setup(lcore, &queue, &scratch);
    struct rte_mbuf *in[BURST], *done[BURST], *tx[BURST];
    int to[BURST];
    uint64_t hz = rte_get_timer_hz(), last = rte_get_timer_cycles(), seen = 0;
    nfc_rcu_online(lcore);
    while (!quit) {
        uint16_t n = rte_eth_rx_burst(0, queue, in, BURST);
        if (n == 0 && !live && (seen > 0 || rte_get_timer_cycles() - last > hz * idle_ms / 1000))
            break; /* as forward(): without --live the first empty burst after traffic ends the input */
        seen += n;
        if (n > 0) {
            nfc_burst(in, n, 0, logical[0], pkt, scratch, pool, jumbo, out_port, done, to);
            uint16_t k = 0;
            for (uint16_t i = 0; i < n; i++)
                if (done[i] != NULL)
                    tx[k++] = done[i];
            for (uint16_t sent = 0; sent < k && !quit;)
                sent += rte_eth_tx_burst(1, queue, tx + sent, (uint16_t)(k - sent));
        }
        nfc_rcu_quiescent(lcore);
    }
    nfc_rcu_offline(lcore);
    return 0;
}

