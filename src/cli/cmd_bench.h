/* cmd_bench.h - what `hgrn bench` (cmd_bench.c), its kernel timings
 * `hgrn bench --ops` (cmd_bench_ops.c) and its token-mixer timings
 * `hgrn bench --mixers` (cmd_bench_mixers.c) share. */
#ifndef HGRN_CMD_BENCH_H
#define HGRN_CMD_BENCH_H

#include "backend.h"
#include "rng.h"

#include <stddef.h>

/* n random finite values in [-1, 1) uploaded to dev, in the backend's
 * activation format (as_act != 0: fp32 or bf16) or fp32. For timings only: a
 * block of at most 1 Mi values is drawn and repeated. */
void bench_upload_random(Backend *bk, void *dev, size_t n, int as_act, Rng *r);

/* The device's copy bandwidth (bytes read + written per second, GB/s) and its
 * square-GEMM rate in the activation precision (TFLOP/s; *gemm_n: the side),
 * measured now, so that per-op numbers are read against this machine rather
 * than a datasheet. */
void bench_ceilings(Backend *bk, double *gbs, double *tflops, int *gemm_n);

/* `hgrn bench --ops` (argv as given to `hgrn bench`). */
int cmd_bench_ops(int argc, char **argv);
/* `hgrn bench --mixers` (cmd_bench_mixers.c; argv as given to `hgrn bench`). */
int cmd_bench_mixers(int argc, char **argv);

/* The --help text of `hgrn bench`, --ops included, on stdout. */
void bench_usage(void);

#endif
