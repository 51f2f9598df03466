/* cmd_bench.h - the two timings `hgrn bench` hands its command line to:
 * `hgrn bench --ops` (cmd_bench_ops.c) and `hgrn bench --mixers`
 * (cmd_bench_mixers.c). */
#ifndef HGRN_CMD_BENCH_H
#define HGRN_CMD_BENCH_H

/* argv as given to `hgrn bench` */
int cmd_bench_ops(int argc, char **argv);
int cmd_bench_mixers(int argc, char **argv);

#endif
