/* test_op_timer.c - the per-op timing wrapper of `hgrn bench`: it must wrap
 * every op the inner backend has (a Backend op missing from its list would be
 * NULL in the wrapper and crash the first model that calls it), pass results
 * through unchanged, and count what it timed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "op_timer.h"
#include "test_util.h"

typedef void (*AnyFn)(void);

/* Function-pointer slot i of a Backend (every member after act_elem is one). */
#define FIRST_SLOT offsetof(Backend, alloc)
#define NSLOTS ((sizeof(Backend) - FIRST_SLOT) / sizeof(AnyFn))
static AnyFn slot(const Backend *bk, size_t i) {
    AnyFn f;
    memcpy(&f, (const char *)bk + FIRST_SLOT + i * sizeof(AnyFn), sizeof f);
    return f;
}

static void test_every_op_wrapped(void **s) {
    (void)s;
    char err[256];
    Backend *cpu = backend_cpu_create(1, err, sizeof err);
    assert_non_null(cpu);
    Backend *t = op_timer_wrap(cpu);
    assert_non_null(t);
    assert_true((sizeof(Backend) - FIRST_SLOT) % sizeof(AnyFn) == 0);
    for (size_t i = 0; i < NSLOTS; i++)
        if (slot(cpu, i) && !slot(t, i))
            fail_msg("Backend op slot %zu (byte offset %zu) is not wrapped by op_timer.c's TIMED_OPS", i,
                     FIRST_SLOT + i * sizeof(AnyFn));
    t->destroy(t); /* destroys cpu too */
}

/* A timed op gives the inner op's bits and appears in the table with its call count. */
static void test_timed_op_passes_through(void **s) {
    (void)s;
    char err[256];
    Backend *ref = backend_cpu_create(1, err, sizeof err);
    Backend *t = op_timer_wrap(backend_cpu_create(1, err, sizeof err));
    assert_non_null(ref);
    assert_non_null(t);
    const int B = 2, N = 9, D = 5, W = D;
    Rng r;
    rng_seed(&r, 11);
    float a[2 * 9 * 5], x[2 * 9 * 5], out_ref[2 * 9 * 5], out_t[2 * 9 * 5];
    tu_fill_uniform(&r, a, sizeof a / sizeof *a, 0.5f, 0.99f);
    tu_fill_normal(&r, x, sizeof x / sizeof *x, 1.0f);
    ref->scan_fwd(ref, out_ref, a, W, x, W, B, N, D, 0, SCAN_BOTH);
    op_timer_enable(t, 1);
    for (int k = 0; k < 3; k++) t->scan_fwd(t, out_t, a, W, x, W, B, N, D, 0, SCAN_BOTH);
    assert_memory_equal(out_ref, out_t, sizeof out_ref);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    op_timer_print(t, f, 3, 0, 0);
    fclose(f);
    const char *row = strstr(buf, "scan_fwd");
    if (!row) fail_msg("no scan_fwd row in:\n%s", buf);
    int calls = 0;
    assert_int_equal(sscanf(row, "scan_fwd %d", &calls), 1);
    assert_int_equal(calls, 1); /* calls per step: 3 calls over 3 steps */
    free(buf);
    t->destroy(t);
    ref->destroy(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_wrapped),
        cmocka_unit_test(test_timed_op_passes_through),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
