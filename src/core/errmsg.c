/* errmsg.c - see errmsg.h. */
#include "errmsg.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    char raw[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* One line, whatever names or values the message quotes: control
     * characters are written as escapes (\n, \t, \x01). */
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p && o + 1 < errlen; p++) {
        char esc[8];
        if (*p >= 0x20 && *p != 0x7f) {
            err[o++] = (char)*p;
            continue;
        }
        if (*p == '\n')
            strcpy(esc, "\\n");
        else if (*p == '\r')
            strcpy(esc, "\\r");
        else if (*p == '\t')
            strcpy(esc, "\\t");
        else
            snprintf(esc, sizeof esc, "\\x%02x", *p);
        size_t l = strlen(esc);
        if (o + l + 1 > errlen) break;
        memcpy(err + o, esc, l);
        o += l;
    }
    err[o] = 0;
}
