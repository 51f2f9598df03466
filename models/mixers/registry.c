/* registry.c - every token mixer model.mixer can name, in the order `hgrn
 * info --mixers` lists them. Adding one: its file in this folder defines a
 * TokenMixer, and one line in MIXERS lists it. */
#include "mixer.h"

#include <stdio.h>
#include <string.h>

/* X(name): the file name.c here defines `const TokenMixer name_mixer`. */
#define MIXERS(X) \
    X(hgru1)      \
    X(hgru2)      \
    X(lru)        \
    X(mingru)     \
    X(minlstm)

#define DECLARE(name) extern const TokenMixer name##_mixer;
MIXERS(DECLARE)
#define ENTRY(name) &name##_mixer,
static const TokenMixer *const mixers[] = {MIXERS(ENTRY)};
#define NMIXERS (int)(sizeof mixers / sizeof mixers[0])

const TokenMixer *mixer_at(int i) { return i >= 0 && i < NMIXERS ? mixers[i] : NULL; }

const TokenMixer *mixer_find(const char *name) {
    for (int i = 0; i < NMIXERS; i++)
        if (!strcmp(mixers[i]->name, name)) return mixers[i];
    return NULL;
}

void mixer_names(char *buf, size_t len) {
    size_t used = 0;
    if (len) buf[0] = 0;
    for (int i = 0; i < NMIXERS && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ", %s" : "%s", mixers[i]->name);
}
