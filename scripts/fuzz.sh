#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] - build the libFuzzer target over the image
# decode path (data_loader/fuzz_decode.c) with clang + ASan + UBSan and run it
# for SECONDS (default 30) on a seed corpus of generated JPEG / PNG files
# (baseline, progressive, grayscale, CMYK, 4:4:4, PNG variants, truncations).
# Exit status: 0 when no crash was found. Crash inputs land in $OUT (default
# build/fuzz/crashes).
set -euo pipefail
secs="${1:-30}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/build/fuzz}"
mkdir -p "$out/corpus" "$out/crashes"
out="$(cd "$out" && pwd)"   # absolute: the run below changes directory

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz.sh: installing clang" >&2
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq clang >/dev/null
    else sudo apt-get update -qq && sudo apt-get install -y -qq clang >/dev/null; fi
fi

# 1. seed corpus, written with libjpeg / libpng by a small generator
cat > "$out/gen.c" <<'GEN'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <png.h>
static void jpg(const char *p, int w, int h, int comps, J_COLOR_SPACE cs, int prog, int hs, int vs, int q) {
    unsigned char *px = malloc((size_t)w * h * comps);
    for (int i = 0; i < w * h * comps; i++) px[i] = (unsigned char)((i * 37) ^ (i / (w * comps)) * 11);
    struct jpeg_compress_struct c; struct jpeg_error_mgr e; c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c); FILE *f = fopen(p, "wb"); jpeg_stdio_dest(&c, f);
    c.image_width = w; c.image_height = h; c.input_components = comps; c.in_color_space = cs;
    jpeg_set_defaults(&c); jpeg_set_quality(&c, q, TRUE);
    if (comps == 3) { c.comp_info[0].h_samp_factor = hs; c.comp_info[0].v_samp_factor = vs; }
    if (prog) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) { JSAMPROW r = px + (size_t)c.next_scanline * w * comps; jpeg_write_scanlines(&c, &r, 1); }
    jpeg_finish_compress(&c); jpeg_destroy_compress(&c); fclose(f); free(px);
}
static void png(const char *p, int w, int h, int ct, int ch, int inter) {
    unsigned char *px = malloc((size_t)w * h * ch);
    for (int i = 0; i < w * h * ch; i++) px[i] = (unsigned char)(i * 13);
    FILE *f = fopen(p, "wb"); png_structp s = png_create_write_struct(PNG_LIBPNG_VER_STRING, 0, 0, 0);
    png_infop in = png_create_info_struct(s); png_init_io(s, f);
    png_set_IHDR(s, in, w, h, 8, ct, inter, 0, 0); png_write_info(s, in);
    int passes = png_set_interlace_handling(s);
    for (int k = 0; k < passes; k++) for (int y = 0; y < h; y++) png_write_row(s, px + (size_t)y * w * ch);
    png_write_end(s, 0); png_destroy_write_struct(&s, &in); fclose(f); free(px);
}
int main(int argc, char **argv) {
    char p[4096]; const char *d = argv[1]; (void)argc;
#define P(n) (snprintf(p, sizeof p, "%s/%s", d, n), p)
    jpg(P("base420.jpg"), 67, 45, 3, JCS_RGB, 0, 2, 2, 90);
    jpg(P("base444.jpg"), 33, 17, 3, JCS_RGB, 0, 1, 1, 75);
    jpg(P("base422.jpg"), 40, 40, 3, JCS_RGB, 0, 2, 1, 50);
    jpg(P("prog.jpg"), 50, 31, 3, JCS_RGB, 1, 2, 2, 85);
    jpg(P("gray.jpg"), 29, 23, 1, JCS_GRAYSCALE, 0, 1, 1, 90);
    jpg(P("cmyk.jpg"), 24, 16, 4, JCS_CMYK, 0, 1, 1, 90);
    png(P("rgb.png"), 21, 13, PNG_COLOR_TYPE_RGB, 3, PNG_INTERLACE_NONE);
    png(P("rgba_interlaced.png"), 19, 11, PNG_COLOR_TYPE_RGB_ALPHA, 4, PNG_INTERLACE_ADAM7);
    png(P("gray.png"), 9, 30, PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE);
    return 0;
}
GEN
cc -O1 -o "$out/gen" "$out/gen.c" -ljpeg -lpng
"$out/gen" "$out/corpus"
# truncated copies as seeds too
for f in "$out"/corpus/*.jpg; do head -c $(( $(stat -c %s "$f") / 2 )) "$f" > "${f%.jpg}_half.bin"; done

# 2. the fuzzer
clang -g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/data_loader" -I"$root/src/core" \
    "$root/data_loader/fuzz_decode.c" -o "$out/fuzz_decode" -ljpeg -lpng -lz -lm

# 3. run for a bounded time
cd "$out"
"$out/fuzz_decode" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
    -artifact_prefix="$out/crashes/" -print_final_stats=1 "$out/corpus" 2>&1 | tail -n 25
