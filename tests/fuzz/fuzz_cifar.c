/* fuzz_cifar.c - libFuzzer target over the CIFAR-10 batch reader of
 * data_loader/cifar10.c: the first byte chooses the record count (1 to 4;
 * real files hold 10000) and gray or RGB, the rest is the file. A failure
 * must be a one-line message naming the file; what loads has labels 0..9.
 * Built by scripts/fuzz.sh (or -DHGRN_FUZZ=ON). */
#include "cifar10.c"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int records = 1 + data[0] % 4, gray = (data[0] >> 2) & 1;
    uint8_t *px = malloc((size_t)records * 3 * 1024), labels[4];
    if (!px) return 0;
    char err[1024] = "";
    if (cifar_parse(data + 1, size - 1, "fuzz_batch.bin", records, gray, px, labels, err, sizeof err) == 0) {
        for (int i = 0; i < records; i++)
            if (labels[i] > 9) abort();
    } else {
        fuzz_check_message(err, "fuzz_batch.bin");
    }
    free(px);
    return 0;
}
