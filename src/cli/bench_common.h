/* bench_common.h - what the three timings of `hgrn bench` share
 * (bench_common.c): cmd_bench.c, cmd_bench_ops.c and cmd_bench_mixers.c
 * use it, and it uses none of them. */
#ifndef HGRN_BENCH_COMMON_H
#define HGRN_BENCH_COMMON_H

#include "backend.h"
#include "cli.h"
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

/* cli_parse for the command `who` ("hgrn bench --ops", ...): 0, or -1
 * after one line "who: why" on stderr. */
int bench_parse(Cli *cli, int argc, char **argv, const char *flags, const char *who);

/* The op timer (op_timer.h) around a backend just created: inner, or NULL
 * when its creation failed with the message err. NULL after one line
 * "who: why" on stderr (inner destroyed). */
Backend *bench_timed(Backend *inner, const char *err, const char *who);

/* The --help text of `hgrn bench`, --ops and --mixers included, on stdout. */
void bench_usage(void);

#endif
