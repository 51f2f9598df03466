/* grid.c - grid_transpose of the CPU backend (contract in backend.h;
 * model.scan2d: a grid of tokens from row order to column order and back,
 * DESIGN.md section 4). */
#include "cpu_backend.h"
#include "cpu_ops.h"

#include <string.h>

static void cpu_grid_transpose(Backend *bk, float *out, int ldo, const float *in, int ldi, int B, int H, int W, int C,
                               int f32, int accumulate) {
    (void)f32; /* every element is 4 bytes wide on this backend */
    const long rows = (long)B * H * W;
    if (rows <= 0 || C <= 0) return;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (long r = 0; r < rows; r++) { /* r: output row b (W H) + w H + h */
        const long b = r / ((long)H * W), t = r % ((long)H * W), w = t / H, h = t % H;
        const float *restrict src = in + (size_t)(b * H * W + h * W + w) * ldi;
        float *restrict dst = out + (size_t)r * ldo;
        if (accumulate) {
#pragma omp simd
            for (int c = 0; c < C; c++) dst[c] += src[c];
        } else {
            memcpy(dst, src, (size_t)C * sizeof(float));
        }
    }
}

void backend_cpu_grid_register(Backend *bk) { bk->grid_transpose = cpu_grid_transpose; }
