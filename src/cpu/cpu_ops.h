/* cpu_ops.h - the CPU backend's ops that live in files of their own, one
 * file per op family named as its CUDA counterpart in cuda/ (hgru1.c /
 * hgru1.cu, ...): each installs its ops in a CPU backend's table, called by
 * backend_cpu_create. Private to src/cpu/. */
#ifndef HGRN_CPU_OPS_H
#define HGRN_CPU_OPS_H

#include "backend.h"

void backend_cpu_hgru1_register(Backend *bk); /* hgru1.c: hgru1_fwd / _bwd */
void backend_cpu_hgru2_register(Backend *bk); /* hgru2.c: hgru2_fwd / _bwd */
void backend_cpu_scan_register(Backend *bk); /* scan.c: scan_fwd / _bwd */
void backend_cpu_scan_gates_register(Backend *bk); /* scan_gates.c: mingate, lru_params, diag */
void backend_cpu_batchnorm_register(Backend *bk); /* batchnorm.c: batchnorm_fwd / _bwd */
void backend_cpu_grid_register(Backend *bk); /* grid.c: grid_transpose */

#endif
