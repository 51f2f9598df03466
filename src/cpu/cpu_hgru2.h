/* cpu_hgru2.h - double-precision entry points of the CPU backend's HGRU2
 * scan (hgru2.c) that the tests use as references. */
#ifndef HGRN_CPU_HGRU2_H
#define HGRN_CPU_HGRU2_H

/* Same contracts as Backend.hgru2_fwd / hgru2_bwd, in double, single-threaded. */
void hgru2_cpu_ref_fwd(double *out, const double *x, int ld, const double *beta, int B, int N, int D, int e);
void hgru2_cpu_ref_bwd(double *dx, double *dbeta, const double *dout, const double *x, int ld, const double *beta,
                       int B, int N, int D, int e);

#endif
