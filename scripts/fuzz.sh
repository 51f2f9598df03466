#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...] - build the libFuzzer targets with
# clang + ASan + UBSan and run each for SECONDS (default 60), as many at
# once as there are cores (HGRN_FUZZ_JOBS to choose; 7 targets of 60 s take
# 4 minutes on 2 cores):
#   decode       tests/fuzz/fuzz_decode.c: JPEG / PNG decoding, crops, resizing
#   safetensors  tests/fuzz/fuzz_safetensors.c: the safetensors reader (+ write round trip)
#   config       tests/fuzz/fuzz_config.c: the config parser and overrides (+ write round trip)
#   idx          tests/fuzz/fuzz_idx.c: the IDX (Fashion-MNIST) reader, gzip or plain
#   cifar        tests/fuzz/fuzz_cifar.c: the CIFAR-10 batch reader
#   class_names  tests/fuzz/fuzz_class_names.c: the class-names reader
#   shards       tests/fuzz/fuzz_shards.c: the shard index parser and the tar reader
# (all of them when none is named). Seeds: tests/fuzz/<target>/ (the decode
# seeds are generated with libjpeg / libpng). Each target's run grows its
# own corpus in $OUT/<target>/corpus (default build/fuzz); crash inputs land
# in $OUT/<target>/crashes, to be kept in tests/fuzz/<target>/ once fixed.
# Ends with one line per target, "fuzz_NAME: R runs, S s, C crashes",
# also written to $OUT/summary.txt. Exit status 1 when any target crashed.
set -euo pipefail
secs="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(decode safetensors config idx cifar class_names shards)
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/build/fuzz}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"   # absolute: the runs below change directory

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz.sh: installing clang" >&2
    if [ "$(id -u)" = 0 ]; then bash "$root/scripts/deps.sh" clang
    else sudo bash "$root/scripts/deps.sh" clang; fi
fi

# the decode seeds: small JPEG / PNG files written with libjpeg / libpng
decode_seeds() {
    local d="$out/decode/seeds"
    mkdir -p "$d"
cat > "$out/decode/gen.c" <<'GEN'
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
/* every colour type / depth with transparency: palette + tRNS, gray + tRNS, 16-bit */
static void png_t(const char *p, int w, int h, int ct, int depth, int ch) {
    int bps = depth == 16 ? 2 : 1;
    unsigned char *px = malloc((size_t)w * h * ch * bps);
    for (int i = 0; i < w * h * ch * bps; i++) px[i] = (unsigned char)((i * 29) % (depth < 8 ? 1 << depth : 256));
    FILE *f = fopen(p, "wb"); png_structp s = png_create_write_struct(PNG_LIBPNG_VER_STRING, 0, 0, 0);
    png_infop in = png_create_info_struct(s); png_init_io(s, f);
    png_set_IHDR(s, in, w, h, depth, ct, 0, 0, 0);
    png_color pal[16]; png_byte ta[8] = {0, 40, 80, 120, 160, 200, 240, 255}; png_color_16 tc = {0};
    for (int k = 0; k < 16; k++) { pal[k].red = (png_byte)(k * 16); pal[k].green = (png_byte)(255 - k * 9); pal[k].blue = (png_byte)(k * 7); }
    if (ct == PNG_COLOR_TYPE_PALETTE) { png_set_PLTE(s, in, pal, 16); png_set_tRNS(s, in, ta, 8, NULL); }
    if (ct == PNG_COLOR_TYPE_GRAY) { tc.gray = 1; png_set_tRNS(s, in, NULL, 0, &tc); }
    png_write_info(s, in);
    if (depth < 8) png_set_packing(s);
    for (int y = 0; y < h; y++) png_write_row(s, px + (size_t)y * w * ch * bps);
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
    png_t(P("palette4_trns.png"), 13, 7, PNG_COLOR_TYPE_PALETTE, 4, 1);
    png_t(P("gray2_trns.png"), 11, 5, PNG_COLOR_TYPE_GRAY, 2, 1);
    png_t(P("rgba16.png"), 7, 6, PNG_COLOR_TYPE_RGB_ALPHA, 16, 4);
    png_t(P("graya8.png"), 8, 9, PNG_COLOR_TYPE_GRAY_ALPHA, 8, 2);
    return 0;
}
GEN
    cc -O1 -o "$out/decode/gen" "$out/decode/gen.c" -ljpeg -lpng
    "$out/decode/gen" "$d"
    for f in "$d"/*.jpg; do head -c $(( $(stat -c %s "$f") / 2 )) "$f" > "${f%.jpg}_half.bin"; done
}

core="$root/src/core"
data="$root/data_loader"
fz="$root/tests/fuzz"   # the targets, beside their seeds
sources() {   # the sources each target is built from (its reader compiled in, instrumented)
    case $1 in
    decode) echo "$fz/fuzz_decode.c -ljpeg -lpng -lz -lm" ;;
    safetensors) echo "$fz/fuzz_safetensors.c $core/safetensors.c $core/fsutil.c $core/errmsg.c" ;;
    config) echo "$fz/fuzz_config.c $core/config.c $core/fsutil.c $core/errmsg.c -lm" ;;
    idx) echo "$fz/fuzz_idx.c $core/errmsg.c -lz" ;;
    cifar) echo "$fz/fuzz_cifar.c $data/class_names.c $core/safetensors.c $core/fsutil.c $core/errmsg.c" ;;
    class_names) echo "$fz/fuzz_class_names.c $data/class_names.c $core/safetensors.c $core/fsutil.c $core/errmsg.c" ;;
    shards) echo "$fz/fuzz_shards.c $data/shard_index.c $data/shard_tar.c $data/strpool.c $core/fsutil.c $core/errmsg.c -larchive -lz" ;;
    *) echo "fuzz.sh: unknown target '$1' (decode safetensors config idx cifar class_names shards)" >&2; exit 2 ;;
    esac
}

jobs="${HGRN_FUZZ_JOBS:-$(nproc)}"
case $jobs in ''|*[!0-9]*|0) echo "fuzz.sh: HGRN_FUZZ_JOBS must be a positive integer, not '$jobs'" >&2; exit 2 ;; esac

# build every target first (a compile error stops here, before any fuzzing)
for t in "${targets[@]}"; do
    src=$(sources "$t")
    mkdir -p "$out/$t/corpus" "$out/$t/crashes" "$out/$t/crashes.earlier"
    # this run's crashes alone are counted; earlier ones are kept aside
    find "$out/$t/crashes" -type f -exec mv -t "$out/$t/crashes.earlier" {} +
    # shellcheck disable=SC2086  # src is a list of files and flags
    clang -g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -I"$data" -I"$core" $src -o "$out/$t/fuzz_$t"
    if [ "$t" = decode ]; then decode_seeds; fi
done

# one target's run; its exit status lands in $out/<target>/rc
fuzz_one() {
    local t=$1 seeds="$root/tests/fuzz/$1" rc=0
    [ "$t" != decode ] || seeds="$out/decode/seeds"
    (cd "$out/$t" && ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 ./fuzz_$t \
        -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
        -artifact_prefix="$out/$t/crashes/" -print_final_stats=1 corpus "$seeds" >log.txt 2>&1) || rc=$?
    echo "$rc" > "$out/$t/rc"
}

echo "== fuzzing ${#targets[@]} targets, ${secs} s each, $jobs at once =="
running=0
for t in "${targets[@]}"; do
    if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
    echo "== fuzz_$t: ${secs} s =="
    fuzz_one "$t" &
    running=$((running + 1))
done
wait

summary=()
crashed=0
for t in "${targets[@]}"; do
    echo "== fuzz_$t =="
    tail -n 8 "$out/$t/log.txt"
    rc=$(cat "$out/$t/rc" 2>/dev/null || echo 1)
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$t/log.txt" | grep -o '[0-9]*$' || echo 0)
    took=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$out/$t/log.txt" | grep -o 'in [0-9]*' | grep -o '[0-9]*' || echo "$secs")
    crashes=$(find "$out/$t/crashes" -type f | wc -l)
    if [ "$rc" != 0 ] && [ "$crashes" = 0 ]; then crashes=1; fi   # died without an artifact: still a failure
    [ "$crashes" = 0 ] || crashed=1
    summary+=("fuzz_$t: ${runs:-0} runs, ${took:-$secs} s, $crashes crashes")
done
printf '%s\n' "${summary[@]}" > "$out/summary.txt"
echo "== fuzzing summary =="
cat "$out/summary.txt"
exit $crashed
