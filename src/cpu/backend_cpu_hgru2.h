/* backend_cpu_hgru2.h - the HGRU2 scan of the CPU backend (backend_cpu_hgru2.c):
 * registration into a CPU op table, and double-precision entry points that
 * the tests use as references. */
#ifndef HGRN_BACKEND_CPU_HGRU2_H
#define HGRN_BACKEND_CPU_HGRU2_H

#include "backend.h"

/* Installs hgru2_fwd / hgru2_bwd in a CPU backend's table. */
void backend_cpu_hgru2_register(Backend *bk);

/* Same contracts as Backend.hgru2_fwd / hgru2_bwd, in double, single-threaded. */
void hgru2_cpu_ref_fwd(double *out, const double *x, int ld, const double *beta, int B, int N,
                       int D, int e);
void hgru2_cpu_ref_bwd(double *dx, double *dbeta, const double *dout, const double *x, int ld,
                       const double *beta, int B, int N, int D, int e);

#endif
