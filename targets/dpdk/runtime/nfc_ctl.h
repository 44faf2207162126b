/* nfc control channel, protocol version 1 (docs/control.md).  A UNIX stream socket; every
 * request gets exactly one reply; integers are little-endian.
 *
 *   request  = nfc_ctl_req, then `length` bytes of body
 *   reply    = nfc_ctl_rep, then `length` bytes of body
 *
 * Entry records are uint64_t arrays in the table's .nfp order: the key fields (an LPM
 * table's prefix length after them; a ternary / range table's prefix length, mask or high
 * bound of each non-exact field, then its priority), then for ADD/MODIFY the value fields.  ADD, MODIFY and
 * DELETE of `count` records are all-or-nothing: a message with one bad record changes
 * nothing and its reply names the record (`index`) and why (status, message text).
 * Readers (forwarding lcores) never lock: the tables are lock-free rte_hash tables and
 * replaced or deleted entries are freed after an RCU grace period (rte_rcu_qsbr).
 *
 * Who may connect: the socket file is owner-only (0600), or 0660 with --control-group, and
 * --control-allow-uid uids get an ACL entry each; a peer whose uid (SO_PEERCRED) is not
 * allowed gets one REFUSED reply, unasked, and is closed.  A second program is not given a
 * path a live program serves.  No client holds up another: a request must arrive whole, and a
 * reply be read whole, within --control-timeout-ms of its first byte (time the thread spends
 * serving others does not count), or the client is closed; a client is not read from while
 * its reply is unsent, a DUMP reply holds at most NFC_CTL_MAX_PAGE bytes, and a DUMP of
 * data-plane state waits for its copy without holding up anyone. */
#ifndef NFC_CTL_H
#define NFC_CTL_H

#include <stdint.h>

#define NFC_CTL_VERSION 1
#define NFC_CTL_REQ_MAGIC "NFCQ"
#define NFC_CTL_REP_MAGIC "NFCR"
#define NFC_CTL_MAX_BODY (64u << 20)
#define NFC_CTL_MAX_COUNT (1u << 20)
#define NFC_CTL_MAX_PAGE (1u << 20)     /* body bytes of one DUMP reply */
#define NFC_CTL_MAX_CLIENTS 64
#define NFC_CTL_TIMEOUT_MS 5000         /* default --control-timeout-ms */

struct nfc_ctl_req {
    char magic[4];
    uint8_t version;
    uint8_t op;
    uint16_t table; /* index in HELLO's table list */
    uint32_t count; /* records in the body */
    uint32_t length;
};

struct nfc_ctl_rep {
    char magic[4];
    uint8_t version;
    uint8_t status;
    uint16_t op;
    uint32_t index; /* OK: records done; error: the record at fault */
    uint32_t length;
};

enum nfc_ctl_op {
    NFC_OP_HELLO = 1,    /* body: JSON {version, program, tables: [{name, keys, lpm, acl, match, values, size, state}],
                            objects: [{name, src, kind, size, width}]} */
    NFC_OP_ADD = 2,      /* every key new */
    NFC_OP_MODIFY = 3,   /* every key present: its values replaced */
    NFC_OP_DELETE = 4,   /* every key present */
    NFC_OP_READ = 5,     /* reply body: the values of each key */
    NFC_OP_DUMP = 6,     /* body: u64 position (< 2^32); reply: u64 next (0: done), a page of entries (keys, values) */
    NFC_OP_COUNTERS = 7, /* reply body: JSON {forwarded, drops: {reason: n}, tables: {name: {hits, misses, entries}},
                            state_copy: {slices, cpu_ns, max_ns}} */
    NFC_OP_CLEAR = 8,    /* delete every entry of the table */
    NFC_OP_START = 9,    /* start forwarding (a program started with --wait) */
    NFC_OP_HITS = 10,    /* a switch-cached table's hits since the last HITS (nfc_hits.h); reply: u64 hits not
                            kept, u64 samples lost in the lcores' logs (all tables, since the start), then records
                            (key fields, hits); index: the records.  A table not tracked: NO_TABLE */
    NFC_OP_OBJ_READ = 11,  /* `table`: an object of HELLO's list; body: u64 indices; reply: per index a register's
                              value / a counter's packets, bytes / a meter's configured, cir, cbs, pir, pbs */
    NFC_OP_OBJ_WRITE = 12, /* records: index, then those words (a meter's `configured` left out; all-zero rates:
                              reset to unconfigured, every packet green); all or nothing */
    /* A switch-cached data-plane state (the cache manager; nfc_state.h, "pinned"; another table: NO_TABLE): */
    NFC_OP_PIN = 13,     /* body: keys; reply: per key u64 1 (pinned), 2 (pinned already) or 0 (no live entry),
                            then its values; all or nothing */
    NFC_OP_UNPIN = 14,   /* body: keys; index: how many were pinned (the others are left alone) */
    NFC_OP_TOUCH = 15,   /* records: key, then u64 ns since its last hit on the switch; index: how many found */
    NFC_OP_OVERDUE = 16, /* reply: the keys of pinned entries whose timer has run out (one page at most) */
    /* The anti-replay windows of ESP (nfc_esp.h; `table` unused): */
    NFC_OP_WINDOWS = 17, /* body: u64 position (< 2^32), 0 to start; reply: u64 next (0: done), then a page of
                            records (SA number, top, bitmap); index: the records */
    NFC_OP_WINDOW_MERGE = 18, /* records (SA number < 2^32, top, bitmap), each merged into the SA's window;
                                 NO_MEMORY: a window could not be made (those before it are merged) */
};

enum nfc_ctl_status {
    NFC_OK = 0,
    NFC_E_BAD_REQUEST = 1, /* bad magic, version or length: the connection is closed after the reply (also
                              sent unasked to a connection that cannot be taken: too many, no descriptor) */
    NFC_E_BAD_OP = 2,
    NFC_E_NO_TABLE = 3,
    NFC_E_READ_ONLY = 4, /* data-plane state: only the forwarding lcore writes it */
    NFC_E_OUT_OF_RANGE = 5, /* a field wider than the table says, a prefix too long, a DUMP position >= 2^32 */
    NFC_E_EXISTS = 6,
    NFC_E_NOT_FOUND = 7,
    NFC_E_FULL = 8,
    NFC_E_NO_MEMORY = 9,
    NFC_E_DUPLICATE = 10, /* the same key twice in one message */
    NFC_E_REFUSED = 11,   /* the peer's uid may not use the channel: sent on accept, then closed */
    NFC_E_BUSY = 12,      /* DUMP of data-plane state: the forwarding lcore made no progress on the copy for 1 s */
};

extern volatile int nfc_started;

/* The channel's command-line flags: --control PATH, --control-group NAME, --control-allow-uid
 * UID (repeatable; default: the program's own uid and root), --control-timeout-ms N.  How many
 * of argv[0..argc) the flag at argv[0] takes; 0: not one of them, -1: a bad value. */
int nfc_control_arg(int argc, char **argv);
/* Serve the channel on the --control socket from a control thread (no --control: nothing);
 * 0 or -1. */
int nfc_control_start(void);
void nfc_control_stop(void);

/* The counters as JSON (also printed on exit); returns the length written, at most cap - 1. */
int nfc_counters_json(char *buf, int cap);

#endif
