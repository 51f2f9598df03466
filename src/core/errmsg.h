/* errmsg.h - the one way errors are reported upward: a printf-style message
 * into the caller's (err, errlen) buffer, which may be NULL. The message is
 * kept to one line: control characters in it (from a quoted name or value)
 * become escapes such as \n. At most 2047 characters before escaping. */
#ifndef HGRN_ERRMSG_H
#define HGRN_ERRMSG_H

#include <stddef.h>

void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
