/* resume_config.c - the configuration of a resumed run; see resume_config.h. */
#include "resume_config.h"
#include "checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The run's configuration from saved: 0, or -1 with a message. */
static int load_saved(const char *saved, int from_ckpt, Config *c, char *err, size_t errlen) {
    config_defaults(c);
    if (!from_ckpt) return config_load(c, saved, err, errlen);
    char **classes = NULL;
    int n = 0;
    if (ckpt_read_config(saved, c, &classes, &n, err, errlen) < 0) return -1;
    free_class_names(classes, n);
    return 0;
}

/* s as a JSON string's contents into out (quotes and backslashes escaped,
 * control characters as \u00XX). */
static void json_text(char *out, size_t len, const char *s) {
    size_t o = 0;
    for (; *s && o + 7 < len; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            o += (size_t)snprintf(out + o, len - o, "\\%c", ch);
        else if (ch < 0x20)
            o += (size_t)snprintf(out + o, len - o, "\\u%04x", ch);
        else
            out[o++] = (char)ch;
    }
    out[o] = 0;
}

int resume_check_config(const Config *cfg, const char *saved, int from_ckpt, int allow, char *changes,
                        size_t changeslen, char *said, size_t saidlen, char *err, size_t errlen) {
    changes[0] = said[0] = 0;
    Config here = *cfg, run;
    char why[1200];
    if (config_absolute_paths(&here, why, sizeof why) < 0) {
        snprintf(err, errlen, "%.1100s", why);
        return -1;
    }
    if (load_saved(saved, from_ckpt, &run, why, sizeof why) < 0) {
        if (!allow) {
            snprintf(err, errlen,
                     "--resume: cannot compare the configuration with the run's: %.900s (pass "
                     "--allow-changes to resume without comparing)",
                     why);
            return -2;
        }
        snprintf(said, saidlen,
                 "hgrn: warning: --resume --allow-changes: the run's configuration is not compared: "
                 "%.1100s\n",
                 why);
        return 0;
    }
    const int n = config_diff(&here, &run, NULL, 0);
    ConfigDiff *d = n ? calloc((size_t)n, sizeof *d) : NULL;
    if (n && !d) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    config_diff(&here, &run, d, n);
    const int shown = n;
    int refused = -1, others = 0;
    for (int i = 0; i < shown; i++) {
        if (d[i].may_change || allow) continue;
        if (refused < 0)
            refused = i;
        else
            others++;
    }
    if (refused >= 0) {
        int o = snprintf(err, errlen,
                         "--resume: %s is %.200s here but %.200s in %.400s (pass --allow-changes to "
                         "accept)",
                         d[refused].key, d[refused].here, d[refused].saved, saved);
        for (int i = refused + 1, listed = 0; i < shown && o > 0 && (size_t)o < errlen; i++) {
            if (d[i].may_change) continue;
            if (listed == 3) {
                o += snprintf(err + o, errlen - (size_t)o, "; and %d more", others - listed);
                break;
            }
            o += snprintf(err + o, errlen - (size_t)o, "; %s differs too (%.100s here, %.100s there)", d[i].key,
                          d[i].here, d[i].saved);
            listed++;
        }
        free(d);
        return -2;
    }
    size_t used = 0, sl = 0;
    for (int i = 0; i < shown; i++) {
        const int l =
            snprintf(said + sl, saidlen - sl, "--resume: %s is %.200s here, %.200s in %.400s: changed (%s)\n", d[i].key,
                     d[i].here, d[i].saved, saved, d[i].may_change ? "it may change on resume" : "--allow-changes");
        if (l > 0 && sl + (size_t)l < saidlen)
            sl += (size_t)l;
        else
            said[sl] = 0; /* the lines that fit */
        char a[1300], b[1300], item[2800];
        json_text(a, sizeof a, d[i].here);
        json_text(b, sizeof b, d[i].saved);
        const int w = snprintf(item, sizeof item, "%s{\"key\": \"%s\", \"here\": \"%s\", \"run\": \"%s\"}",
                               used ? ", " : "", d[i].key, a, b);
        if (w > 0 && used + (size_t)w < changeslen) {
            memcpy(changes + used, item, (size_t)w + 1);
            used += (size_t)w;
        }
    }
    free(d);
    return 0;
}
