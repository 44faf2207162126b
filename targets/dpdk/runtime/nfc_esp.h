/* nfc server runtime: ESP (RFC 4303 tunnel mode, AES-GCM-128 per RFC 4106, or AES-CBC-128 per
 * RFC 3602 with HMAC-SHA1-96 per RFC 2404) with DPDK's crypto, and the anti-replay window (RFC 4303 §3.4.3, Appendix A), as stdlib/ops.nfp's
 * esp_encrypt / esp_decrypt / replay_check define them (compiler/interp/externs.py is the
 * reference).  Crypto runs synchronously on the forwarding lcore through a crypto device's
 * CPU-crypto path (rte_cryptodev_sym_cpu_crypto_process: no enqueue, no completion to wait
 * for), one session per SA key and direction, made when a key is first used.  A burst's
 * encryptions run together at its end (nfc_esp_batch_begin / _end), one call per run of one
 * session's packets, as librte_ipsec does; decryption runs at once (what follows reads the
 * plaintext).
 * Hand-written, shared by every generated program that uses ESP. */
#ifndef NFC_ESP_H
#define NFC_ESP_H

#include <stdint.h>

#include "nfc_rt.h"

#define NFC_ESP_GCM 1  /* nfc_uses_esp's suites: AES-GCM-128 */
#define NFC_ESP_CBC 2  /* AES-CBC-128 + HMAC-SHA1-96 */
#define NFC_ESP_IV 8   /* the explicit IV: the 64-bit sequence number */
#define NFC_ESP_ICV 16 /* the GCM tag */
#define NFC_ESP_CBC_IV 16  /* AES-CBC's IV: AES_key(spi . 0 . seq), stdlib/ops.nfp */
#define NFC_ESP_CBC_ICV 12 /* HMAC-SHA1-96 */
#define NFC_ESP_ROOM (NFC_MAX_PKT + 64) /* bytes of a packet's ESP buffer */
#define NFC_ESP_SESSIONS 8192           /* SA keys x directions with a session at once */
#define NFC_REPLAY_SAS 65536            /* SAs with an anti-replay window */
#define NFC_ESP_BATCH 64                /* encryptions queued per lcore before they run */
#define NFC_ESP_BURST 64                /* the most packets of a burst nfc_esp_burst takes */

/* The crypto devices of the suites the program uses, configured and started: for AES-GCM a
 * DPDK crypto vdev given with --vdev, or crypto_aesni_gcm made here; for AES-CBC + HMAC-SHA1 a
 * crypto_aesni_mb given, or made here.  0, or -1 with the reason on stderr. */
int nfc_esp_init(void);
/* The crypto device stopped (at exit, before rte_eal_cleanup closes it). */
void nfc_esp_stop(void);

/* p's ESP buffer (NFC_ESP_ROOM bytes, the packet's own for the program's life); NULL: no memory. */
uint8_t *nfc_esp_buf(struct nfc_pkt *p);

/* esp_encrypt(outer, esp, spi, seq, key, salt, ...): every valid header after instance `esp`
 * (their checksums already written) and the payload encrypted (nfc_esp_seal) and made the
 * payload, those headers invalid; in place when they lie one after the other in front of the
 * payload in p's mbuf with room for the IV before them (headers that were there move to
 * p->store) and for the trailer after, else gathered in p's ESP buffer.  The payload's bytes,
 * or 0: no session (no memory), no buffer, or too big for it.  The caller fills outer and esp. */
uint32_t nfc_esp_encrypt(struct nfc_pkt *p, int esp, uint32_t spi, uint64_t seq, nfc_u128 key, uint32_t salt,
                         int esn);

/* ESP-encrypt what `buf` holds at NFC_ESP_IV.. (the plaintext, `len` bytes; the buffer has
 * room behind it): pad, trailer (the next header from the first byte's IP version), AES-GCM
 * with the nonce salt . IV (the IV: seq as 64 bits) and the AAD spi . seq (32 bits; with `esn`
 * all 64, RFC 4106 §5), the IV written in front and the ICV behind.  The bytes IV +
 * ciphertext + ICV, or 0: no session for the key (no memory).  Between nfc_esp_batch_begin and
 * _end, with packet p given, the AES-GCM is queued (p->esp_pending) and runs at _end (or when
 * p's payload is needed again), which sets p->esp_failed if it fails. */
uint32_t nfc_esp_seal(uint8_t *buf, uint32_t len, uint32_t spi, uint64_t seq, nfc_u128 key, uint32_t salt, int esn,
                      struct nfc_pkt *p);

/* Batch the lcore's encryptions from here (nfc_burst, around the burst's nfc_run calls) ... */
void nfc_esp_batch_begin(void);
/* The burst about to run (pkt[0..n), code[i] NFC_CONTINUE: it will run): a CBC decryption
 * may decrypt, ahead, the later packets of the burst with the same SPI in the same
 * multi-buffer call, in copies their own calls then take (nfc_esp_decrypt_cbc). */
void nfc_esp_burst(struct nfc_pkt *pkt, const int *code, uint16_t n);
/* ... to here, where they run. */
void nfc_esp_batch_end(void);

/* esp_decrypt(outer, esp, key, salt): p's payload (IV, ciphertext, ICV) decrypted under the
 * header instance `esp` (its first 8 bytes, SPI and sequence number, are the AAD; with `esn`
 * the SPI, seq_high and the sequence number) into p's
 * ESP buffer; 1: the ICV verified and the trailer is well formed, the payload is now the
 * inner packet and instances `outer` and `esp` are invalid; 0: nothing changed (also when
 * no session could be made for the key). */
int nfc_esp_decrypt(struct nfc_pkt *p, int outer, int esp, nfc_u128 key, uint64_t salt, int esn, uint64_t seq_high,
                    int in_place);
/* in_place: the caller drops the packet when the ICV fails, so the payload may be decrypted
 * where it is (in p's mbuf) rather than in a copy. */

/* esp_encrypt_cbc(outer, esp, spi, seq, key, auth_hi, auth_lo, ...): as nfc_esp_encrypt, with
 * AES-CBC-128 under `key` (the plaintext padded to 16-byte blocks, the IV AES_key(spi . 0 .
 * seq)) and HMAC-SHA1-96 under auth_hi . auth_lo (160 bits) over the ESP header, IV and
 * ciphertext, the IV made in the same pass; batched as nfc_esp_seal batches. */
uint32_t nfc_esp_encrypt_cbc(struct nfc_pkt *p, int esp, uint32_t spi, uint64_t seq, nfc_u128 key, uint64_t auth_hi,
                             nfc_u128 auth_lo);

/* esp_decrypt_cbc(outer, esp, key, auth_hi, auth_lo): the ICV checked over the header `esp` and
 * the payload's IV and ciphertext and the ciphertext decrypted in one chained call (in place
 * with `in_place`, else in p's ESP buffer; nothing decrypted is read unless the ICV verified,
 * RFC 4303 §3.4.4), then the trailer checked; 1 and 0 as nfc_esp_decrypt. */
int nfc_esp_decrypt_cbc(struct nfc_pkt *p, int outer, int esp, nfc_u128 key, uint64_t auth_hi, nfc_u128 auth_lo,
                        int in_place);

/* RFC 4303 Appendix A, a window of 64 packets per SA number `sa`: 1 if seq is not 0, was not
 * seen and is not left of the window (it is then marked seen and the window moves); 0
 * otherwise (and for an SA beyond NFC_REPLAY_SAS windows). */
int nfc_replay_check(uint64_t sa, uint64_t seq);

/* RFC 4303 Appendix A2.2: the high 32 bits of SA sa's 64-bit sequence number whose low 32 bits
 * are seql, inferred from its window (which does not move); compiler/interp/state.py's esn_high. */
uint64_t nfc_esn_high(uint64_t sa, uint64_t seql);

/* The windows, for a server that takes over SAs (runtime/carry.py): at most `max` from
 * position *next (0 to start; rte_hash_iterate's), as records (SA number, top, bitmap) in out;
 * how many.  None when the program does no ESP. */
uint32_t nfc_replay_windows(uint32_t *next, uint32_t max, uint64_t *out);

/* Merge what another server's window of SA sa saw: afterwards a number is seen here if it was
 * seen in either (the window's top the higher of the two).  0; -1: no window could be made
 * (the program does no ESP, or NFC_REPLAY_SAS windows exist). */
int nfc_replay_merge(uint32_t sa, uint64_t top, uint64_t bitmap);

#endif
