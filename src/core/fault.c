/* fault.c - fault injection for tests; see fault.h. */
#include "fault.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fault_hit(const char *point, long n) {
    const char *spec = getenv("HGRN_FAULT");
    if (!spec || !*spec) return 0;
    static int warned; /* asked from the training thread alone */
    if (!warned) {
        warned = 1;
        fprintf(stderr,
                "hgrn: warning: HGRN_FAULT is set (%.200s): test fault injection is on; unset it outside "
                "the tests\n",
                spec);
    }
    const size_t pl = strlen(point);
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= pl && !strncmp(p, point, pl)) {
            if (len == pl) return 1;
            if (p[pl] == '@') {
                char num[32];
                size_t nl = len - pl - 1;
                if (nl > 0 && nl < sizeof num) {
                    memcpy(num, p + pl + 1, nl);
                    num[nl] = 0;
                    char *e;
                    long v = strtol(num, &e, 10);
                    if (!*e && v == n) return 1;
                }
            }
        }
        p += len + (end ? 1 : 0);
    }
    return 0;
}

void fault_kill(const char *point, long n) {
    if (!fault_hit(point, n)) return;
    fprintf(stderr, "hgrn: HGRN_FAULT: killed at %s@%ld\n", point, n);
    raise(SIGKILL);
}
