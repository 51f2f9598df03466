/* fuzz_check.h - what every fuzz target asserts about a failure: a message
 * that is one line (no newline, not empty) and names its input. */
#ifndef HGRN_FUZZ_CHECK_H
#define HGRN_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void fuzz_check_message(const char *err, const char *name) {
    if (!err[0] || strchr(err, '\n') || (name && !strstr(err, name))) {
        fprintf(stderr, "bad error message: [%s]\n", err);
        abort();
    }
}

#endif
