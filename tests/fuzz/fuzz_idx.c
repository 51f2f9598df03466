/* fuzz_idx.c - libFuzzer target over the IDX reader of data_loader/fmnist.c
 * (gzip or plain; magic, dimensions, counts, labels, truncation, trailing
 * data). The input is an images file and a labels file: the first 4 bytes
 * (little-endian, modulo what follows) say where the labels begin. A failure
 * must be a one-line message naming the file; what loads must hold the
 * announced bytes and labels below 10. The reader is compiled into this
 * unit for coverage. Built by scripts/fuzz.sh (or -DHGRN_FUZZ=ON). */
#include "fmnist.c"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Parse part [0, len) with parse(r) on a Reader over it. */
static FILE *open_part(const uint8_t *p, size_t len) {
    static const uint8_t none[1];
    return fmemopen((void *)(len ? p : none), len ? len : 1, "rb"); /* 0 bytes: 1 byte, then skip it */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    uint32_t split = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    const uint8_t *p = data + 4;
    size_t rest = size - 4, ni = rest ? split % (rest + 1) : 0;
    char err[1024] = "";
    Fmnist d;
    memset(&d, 0, sizeof d);
    uint32_t n = 0, rows = 0, cols = 0;
    Reader *r = malloc(sizeof *r);
    if (!r) return 0;
    FILE *f = open_part(p, ni);
    if (!f) {
        free(r);
        return 0;
    }
    if (!ni) fgetc(f);
    rd_start(r, f);
    int ok = parse_images(r, "fuzz-images", &d, &n, &rows, &cols, err, sizeof err) == 0;
    rd_close(r);
    if (!ok) fuzz_check_message(err, "fuzz-images");
    if (ok) {
        volatile unsigned sum = 0;
        for (size_t k = 0; k < (size_t)n * rows * cols; k++) sum += d.pixels[k];
        f = open_part(p + ni, rest - ni);
        if (f) {
            if (rest == ni) fgetc(f);
            rd_start(r, f);
            if (parse_labels(r, "fuzz-labels", &d, n, "fuzz-images", err, sizeof err) == 0) {
                for (uint32_t k = 0; k < n; k++)
                    if (d.labels[k] >= FMNIST_CLASSES) abort();
            } else {
                fuzz_check_message(err, "fuzz-labels");
            }
            rd_close(r);
        }
    }
    free(r);
    free(d.pixels);
    free(d.labels);
    return 0;
}
