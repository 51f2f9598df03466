/* fuzz_config.c - libFuzzer target over the config parser: the input as a
 * config file (config_load_text), then as one `--section.key VALUE` override
 * (config_set, key and value split at the first '='). A failure must be a
 * one-line message; a config that loads, validated or not, must write out
 * (config_write) as text that loads back to the same text. Built by
 * scripts/fuzz.sh (or -DHGRN_FUZZ=ON). */
#include "config.h"
#include "fuzz_check.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const Config *c) {
    static char a[CONFIG_TEXT_MAX], b[CONFIG_TEXT_MAX];
    char err[1024] = "";
    if (config_write(c, a, sizeof a) < 0) abort();
    Config d;
    config_defaults(&d);
    if (config_load_text(&d, a, "written", err, sizeof err) < 0) {
        fprintf(stderr, "config_write's text does not load: %s\n", err);
        abort();
    }
    if (config_write(&d, b, sizeof b) < 0 || strcmp(a, b)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char err[1024] = "";
    Config c;
    config_defaults(&c);
    if (config_load_text(&c, text, "fuzz.cfg", err, sizeof err) == 0) {
        if (config_validate(&c, err, sizeof err) < 0) fuzz_check_message(err, NULL);
        round_trip(&c);
    } else {
        fuzz_check_message(err, "fuzz.cfg");
    }
    char *eq = memchr(text, '=', size);
    if (eq && !memchr(text, 0, size)) {
        *eq = 0;
        config_defaults(&c);
        if (config_set(&c, text, eq + 1, err, sizeof err) == 0)
            round_trip(&c);
        else
            fuzz_check_message(err, NULL);
    }
    free(text);
    return 0;
}
