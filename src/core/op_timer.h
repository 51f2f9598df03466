/* op_timer.h - a backend that wraps another and, when switched on, times
 * every op (synchronising the device around each call) and counts the bytes
 * it must move and the FLOPs it must do, for `hgrn bench`'s per-op table.
 * Switched off it only forwards the calls. */
#ifndef HGRN_OP_TIMER_H
#define HGRN_OP_TIMER_H

#include <stdio.h>
#include "backend.h"

Backend *op_timer_wrap(Backend *inner); /* destroy() also destroys inner */
void op_timer_enable(Backend *timer, int on);
void op_timer_reset(Backend *timer);
/* Print the table: per step (totals divided by steps), against the given
 * ceilings (GB/s counting bytes read + written; GEMM FLOP/s). */
void op_timer_print(Backend *timer, FILE *f, int steps, double copy_gbs, double gemm_tflops);
/* Seconds and bytes summed over the ops timed since the last reset:
 * OPS_ALL, OPS_GEMM (matmul_fwd / matmul_bwd) or OPS_NON_GEMM (the rest). */
enum { OPS_ALL, OPS_GEMM, OPS_NON_GEMM };
void op_timer_totals(Backend *timer, int which, double *sec, double *bytes);
/* The bytes and FLOPs of every op timed since the last reset. */
void op_timer_work(Backend *timer, double *bytes, double *flops);

#endif
