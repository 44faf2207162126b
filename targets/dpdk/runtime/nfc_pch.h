/* nfc server runtime: the headers every source of the server program starts with -- the C
 * library's, DPDK's and the runtime's own (nfc_rt.h with the program's nfc_prog.h) -- gathered
 * so that make parses them once per build, as a precompiled header (the Makefile's PCH), not
 * once per source: they are almost all of a source's compile time.  The Makefile includes this
 * header first in every source (-include); gcc takes the precompiled nfc_pch.h.gch/ when it was
 * made with the same flags and reads this text otherwise, so the program is the same either way.
 * Hand-written, shared by every generated program. */
#ifndef NFC_PCH_H
#define NFC_PCH_H

/* the GNU extensions nfc_control.c needs (accept4, struct ucred): defined before the first
 * system header, as every source now sees them first */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_acl.h>
#include <rte_cryptodev.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_hash.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_rcu_qsbr.h>

#include "nfc_ctl.h"
#include "nfc_esp.h"
#include "nfc_rt.h"

#endif
