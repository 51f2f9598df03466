/* rendezvous.h - the TCP rendezvous of a torchrun-style launch (RANK,
 * WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no MPI): rank 0 listens on
 * MASTER_PORT, the other ranks connect to MASTER_ADDR:MASTER_PORT, and rank
 * 0 hands every rank a small blob (the NCCL unique id). A tiny host channel
 * for start-up only, never the gradient path.
 *
 * Every wait has the deadline timeout_s from the call; every socket call is
 * checked. Errors are one line naming the address, the port, this rank and
 * what happened (rank 0 not reachable until the timeout, ranks that never
 * connected, a WORLD_SIZE that differs between ranks, a rank given twice, a
 * connection closed part-way). */
#ifndef HGRN_RENDEZVOUS_H
#define HGRN_RENDEZVOUS_H

#include <stddef.h>

typedef struct Rendezvous Rendezvous;

/* Rank 0 listens on port (the wildcard address of addr's family) and waits
 * for ranks 1 .. world-1; the others connect to addr:port, retrying until
 * the deadline. Each rank says its rank and world size and rank 0 checks
 * them: a mismatch fails that rank and rank 0, and rank 0 tells the ranks
 * already connected. Returns once every rank is connected; world 1 opens no
 * socket. NULL and a message in err on failure. */
Rendezvous *rdv_open(const char *addr, int port, int rank, int world, int timeout_s, char *err, size_t errlen);

/* Rank 0's blob[0 .. len) to every rank (len the same on every rank; checked),
 * rank 0 collecting an acknowledgement from each. 0, or -1 and a message. */
int rdv_broadcast(Rendezvous *r, void *blob, size_t len, char *err, size_t errlen);

/* Every rank waits until all have arrived. 0, or -1 and a message. */
int rdv_barrier(Rendezvous *r, char *err, size_t errlen);

/* Rank 0 only (elsewhere a no-op): tell every connected rank that rank 0
 * failed, so that they stop now with "rank 0 failed: why" from their pending
 * rdv_broadcast / rdv_barrier instead of waiting for the timeout. */
void rdv_fail(Rendezvous *r, const char *why);

void rdv_close(Rendezvous *r);

#endif
