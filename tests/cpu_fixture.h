/* cpu_fixture.h - the CPU backend (2 threads) as the CMocka group fixture
 * of the CPU op and mixer tests: bk is set by cpu_setup and destroyed by
 * cpu_teardown. Header-only; include after <cmocka.h>. */
#ifndef HGRN_CPU_FIXTURE_H
#define HGRN_CPU_FIXTURE_H

#include "backend.h"

static Backend *bk;

static int cpu_setup(void **state) {
    (void)state;
    char err[256] = "";
    bk = backend_cpu_create(2, err, sizeof err);
    if (!bk) print_error("backend_cpu_create: %s\n", err);
    return bk ? 0 : -1;
}

static int cpu_teardown(void **state) {
    (void)state;
    bk->destroy(bk);
    return 0;
}

#endif
