/* fuzz_class_names.c - libFuzzer target over the class-names reader
 * (dataset_parse_names, behind data.class_names and ImageNet's class list).
 * A failure must be a one-line message naming the file; every name that
 * loads is non-empty UTF-8 of at most 1024 bytes without control characters
 * or trailing blanks. Built by scripts/fuzz.sh (or -DHGRN_FUZZ=ON). */
#include "dataset.h"
#include "fuzz_check.h"
#include "safetensors.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024] = "", **names;
    int n = dataset_parse_names((const char *)data, size, "fuzz_names.txt", &names, err, sizeof err);
    if (n < 0) {
        fuzz_check_message(err, "fuzz_names.txt");
        return 0;
    }
    for (int i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        if (!l || l > 1024 || st_utf8_valid_prefix(names[i], l) != l || names[i][l - 1] == ' ') abort();
        for (size_t k = 0; k < l; k++)
            if ((unsigned char)names[i][k] < 0x20 && names[i][k] != '\t') abort();
    }
    dataset_free_names(names, n);
    return 0;
}
