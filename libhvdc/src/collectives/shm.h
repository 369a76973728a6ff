/*
 * shm.h - the all-reduce among the ranks of one node through one shared memory segment: no
 * message copies, no MPI call per step.
 *
 * The segment (POSIX shm, mapped by every rank of the node) holds each rank's arrival flags,
 * one slot per rank and one result slot. A buffer goes through in steps of one slot per rank
 * (1 MiB at most, less with many ranks: shm.c), sized to stay in cache; each step, for N ranks:
 *
 *   1. rank r copies its step's data into slot r (all-reduce: the    then: all ranks arrive
 *      other ranks' parts only)
 *   2. rank r folds part r of the step from slots 0..N-1 (its own    then: all ranks arrive
 *      from its input), in rank order (fold.h), into its own output
 *      and copies it into the result slot (all-reduce; with two
 *      ranks, back into the other rank's slot instead), or into its
 *      own output only (reduce-scatter)
 *   3. all-reduce: every rank copies the other parts out of the result slot (with two ranks:
 *      out of its own slot)
 *
 * The second arrival also says "slots free": nobody writes slot r again before every rank has
 * folded from it. Each element is combined in rank order, x0 op x1 op ... x(N-1), like every
 * host all-reduce (allreduce.h), so the bits equal theirs. Waiting spins briefly, then yields
 * the core (ranks may outnumber cores), and checks `watch`, so a dead peer fails the
 * collective (HVD_ERR_RANK_FAILED) instead of hanging it.
 *
 * Every rank of the node must make the same calls in the same order with the same counts (the
 * background threads execute the same responses in the same order).
 *
 * A fused all-reduce need not pack its tensors into a buffer of its own first: it can pack them
 * straight into slot r (hvdc__shm_staging) and unpack them from the result slot (two ranks:
 * from slot r), which saves step 1's copy and step 3's (hvdc__shm_allreduce_staged; step 2
 * folds in place, into this rank's own part of slot r, and copies it as above).
 *
 * Buffers of a few KiB take the one-shot instead (below): one arrival, and every rank folds
 * every rank's copy itself.
 *
 * defines: hvdc_shm, hvdc__shm_create, _destroy, _allreduce, _reduce_scatter, _allgather_blocks,
 *          _staging, _allreduce_staged, _step, _set_step, _oneshot_max, _oneshot_staging,
 *          _oneshot_exchange, _oneshot_fold
 * Background thread (create: the thread that calls hvd_init).
 */
#ifndef HVDC_SHM_H
#define HVDC_SHM_H

#include <mpi.h>
#include <stddef.h>

#include "base/liveness.h"
#include "hvdc.h"

typedef struct hvdc_shm hvdc_shm;

/* Bytes per rank and step at most (-D to measure others; shm.c says why 1 MiB), and the unit
 * of a step: whole pages, so every dtype's size divides it. HVD_SHM_STEP's range comes from
 * these (runtime/config.c). */
#ifndef HVDC_SHM_SLOT_BYTES
#define HVDC_SHM_SLOT_BYTES (1024 * 1024)
#endif
#define HVDC_SHM_STEP_ALIGN 4096

/* Bytes a one-shot all-reduce takes at most (-D to measure others). Above 4 KiB the two-arrival
 * steps won at np 2 and 4: a one-shot makes every rank read every rank's bytes, the steps each
 * rank's share only (docs/performance.md). */
#ifndef HVDC_SHM_ONESHOT_BYTES
#define HVDC_SHM_ONESHOT_BYTES 4096
#endif

/* Collective over local (the ranks of one node): local rank 0 creates the segment, the others
 * map it, and its name is removed at once (nothing is left in /dev/shm, even after a crash).
 * A failure on one rank is returned there only: the caller agrees on the outcome. */
hvd_status hvdc__shm_create(MPI_Comm local, hvdc_shm **out);

/* The bytes per rank and step now: the slot (1 MiB, less with many ranks) unless set lower. */
size_t hvdc__shm_step(const hvdc_shm *shm);

/* Sets the bytes per rank and step from the next call on (HVD_AUTOTUNE tries several):
 * rounded down to a multiple of 4 KiB (every dtype's size divides it), within [4 KiB, the
 * slot]. Every rank of the node must set the same value between the same two calls
 * (autotuning sends it with a response list, which every rank applies before executing it). */
void hvdc__shm_set_step(hvdc_shm *shm, size_t bytes);

/* Unmaps; not collective (safe after a peer died). NULL-safe. */
void hvdc__shm_destroy(hvdc_shm *shm);

/* dst = every local rank's src, combined in local rank order (src may equal dst). */
hvd_status hvdc__shm_allreduce(hvdc_shm *shm, const void *src, void *dst, size_t count,
                               hvd_dtype dtype, hvd_reduce_op op, hvdc_liveness *watch);

/* This rank's slot: a caller writes up to hvdc__shm_step bytes there, then calls
 * hvdc__shm_allreduce_staged. */
void *hvdc__shm_staging(hvdc_shm *shm);

/* The all-reduce of the count elements (at most hvdc__shm_step bytes) every local rank wrote
 * to its staging slot; *result points at the combined elements (combined as by
 * hvdc__shm_allreduce) and stays valid, read-only, until this rank's next call on shm. The
 * staging slot's contents are not kept. */
hvd_status hvdc__shm_allreduce_staged(hvdc_shm *shm, size_t count, hvd_dtype dtype,
                                      hvd_reduce_op op, hvdc_liveness *watch, const void **result);

/* The one-shot all-reduce, for buffers of up to hvdc__shm_oneshot_max bytes: every rank writes
 * its bytes where hvdc__shm_oneshot_staging says (in its flag line up to 48 bytes, else its
 * slot of the set this arrival uses), arrives once and waits for the others; then every rank
 * reads every rank's bytes and folds them in rank order itself (hvdc__shm_oneshot_fold), which
 * gives the bits of every other path. There is no second arrival: the next one-shot uses the
 * other set, and a rank writes a set again only once every rank has arrived for the call in
 * between, which it makes after it has read this one. */
size_t hvdc__shm_oneshot_max(const hvdc_shm *shm);

/* Where this rank writes the bytes of its next one-shot (bytes <= hvdc__shm_oneshot_max). */
void *hvdc__shm_oneshot_staging(hvdc_shm *shm, size_t bytes);

/* Arrives with the staged bytes and waits until every local rank has; their bytes stay
 * readable (hvdc__shm_oneshot_fold) until this rank's next call on shm. */
hvd_status hvdc__shm_oneshot_exchange(hvdc_shm *shm, hvdc_liveness *watch);

/* dst = count elements at byte offset within every rank's exchanged bytes, combined in local
 * rank order. dst is not in the segment. */
void hvdc__shm_oneshot_fold(hvdc_shm *shm, size_t offset, size_t count, hvd_dtype dtype,
                            hvd_reduce_op op, void *dst);

/* Block r (block.h, count over the node's ranks) of dst, for local rank r, gets every local
 * rank's block r of src combined in rank order; dst's other blocks are not written. src may
 * equal dst. */
hvd_status hvdc__shm_reduce_scatter(hvdc_shm *shm, const void *src, void *dst, size_t count,
                                    hvd_dtype dtype, hvd_reduce_op op, hvdc_liveness *watch);

/* Local rank r holds block r of buf; afterwards every local rank holds all blocks. */
hvd_status hvdc__shm_allgather_blocks(hvdc_shm *shm, void *buf, size_t count, hvd_dtype dtype,
                                      hvdc_liveness *watch);

#endif
