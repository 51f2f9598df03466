/* cpu_scan.h - the element-wise linear recurrence of the CPU backend
 * (cpu_scan.c): registration into a CPU op table. */
#ifndef HGRN_CPU_SCAN_H
#define HGRN_CPU_SCAN_H

#include "backend.h"

/* Installs scan_fwd / scan_bwd in a CPU backend's table. */
void backend_cpu_scan_register(Backend *bk);

#endif
