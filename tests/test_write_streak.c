/* test_write_streak.c - a streak of failed record writes (write_streak.h),
 * as metrics.jsonl and the TensorBoard writer report it: one warning naming
 * the file and the reason when the streak starts, silence while it lasts,
 * and the count of lost records when writing works again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "write_streak.h"

/* What the notes print on stderr, captured in a temporary file. */
static void notes_output(const int *oks, int n, int err_no, char *out, size_t outlen) {
    char path[] = "/tmp/test_write_streak_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    WriteStreak w = {0, 0};
    for (int i = 0; i < n; i++) {
        errno = err_no;
        write_streak_note(&w, "run/metrics.jsonl", oks[i]);
    }
    fflush(stderr);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    const ssize_t k = pread(fd, out, outlen - 1, 0);
    assert_true(k >= 0);
    out[k] = 0;
    close(fd);
    unlink(path);
}

static void test_streak_reported_once(void **state) {
    (void)state;
    /* a random pattern of successes and failures; the output follows it */
    srand(0x5eed);
    int oks[64];
    for (int i = 0; i < 64; i++) oks[i] = rand() % 3 != 0;
    oks[63] = 1;
    char out[16384], want[16384] = "";
    notes_output(oks, 64, ENOSPC, out, sizeof out);
    long lost = 0;
    for (int i = 0; i < 64; i++) {
        char line[256];
        if (!oks[i]) {
            if (lost++ == 0) {
                snprintf(line, sizeof line,
                         "hgrn: warning: run/metrics.jsonl: write failed (%s); records are lost until it works "
                         "again, training goes on\n",
                         strerror(ENOSPC));
                strcat(want, line);
            }
        } else if (lost) {
            snprintf(line, sizeof line, "hgrn: run/metrics.jsonl: writing again; %ld records were lost\n", lost);
            strcat(want, line);
            lost = 0;
        }
    }
    assert_string_equal(out, want);
}

static void test_no_failure_no_output(void **state) {
    (void)state;
    const int oks[5] = {1, 1, 1, 1, 1};
    char out[256];
    notes_output(oks, 5, EIO, out, sizeof out);
    assert_string_equal(out, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streak_reported_once),
        cmocka_unit_test(test_no_failure_no_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
