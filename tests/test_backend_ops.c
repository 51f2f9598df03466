/* test_backend_ops.c - the backends against the one op list (backend_ops.h):
 * every backend sets every op of the list (a backend missing one is refused
 * at creation, naming the op). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_ops.h"

/* Every entry of the list, cleared in turn in a copy of the CPU backend,
 * is refused with its own name; the intact backend passes. */
static void test_missing_op_named(void **s) {
    (void)s;
    char err[256];
    Backend *cpu = backend_cpu_create(1, err, sizeof err);
    assert_non_null(cpu);
    assert_int_equal(backend_check_ops(cpu, err, sizeof err), 0);
    int n = 0;
#define CLEAR_ONE(field, ...)                                                      \
    {                                                                              \
        Backend copy = *cpu;                                                       \
        copy.field = NULL;                                                         \
        err[0] = 0;                                                                \
        assert_int_equal(backend_check_ops(&copy, err, sizeof err), -1);           \
        assert_string_equal(err, "backend cpu: op " #field " is not set");         \
        n++;                                                                       \
    }
    BACKEND_OPS(CLEAR_ONE)
    BACKEND_BASE_FNS(CLEAR_ONE)
#undef CLEAR_ONE
    assert_true(n >= 46);
    cpu->destroy(cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_op_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
