/* grid.cu - grid_transpose (contract in backend.h; model.scan2d: a grid of
 * tokens from row order to column order and back). */
#include "common.cuh"

/* ---- grid transpose: out row (b, w, h) = in row (b, h, w), C elements each ----
 * One block per output row group: blockDim.y rows, threads along the
 * channels (16-byte vectors when every row start is aligned). */
template <typename E, int VEC>
__global__ void k_grid_transpose(E *out, int ldo, const E *in, int ldi, long rows, int H, int W, int C,
                                 int accumulate) {
    const long r = (long)blockIdx.x * blockDim.y + threadIdx.y;
    if (r >= rows) return;
    const long hw = (long)H * W, b = r / hw, t = r % hw, w = t / H, h = t % H;
    const E *src = in + (size_t)(b * hw + h * W + w) * ldi;
    E *dst = out + (size_t)r * ldo;
    if (VEC) {
        constexpr int V = 16 / (int)sizeof(E);
        for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
            float f[V];
            ldv(src + c, f);
            if (accumulate) {
                float o[V];
                ldv(dst + c, o);
#pragma unroll
                for (int e = 0; e < V; e++) f[e] += o[e];
            }
            stv(dst + c, f);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            stf(&dst[c], accumulate ? ldf(&dst[c]) + ldf(&src[c]) : ldf(&src[c]));
    }
}

template <typename E>
static void grid_transpose_launch(CudaImpl *im, E *out, int ldo, const E *in, int ldi, int B, int H, int W, int C,
                                  int accumulate) {
    const long rows = (long)B * H * W;
    const int V = 16 / (int)sizeof(E);
    const int vec = C % V == 0 && ldo % V == 0 && ldi % V == 0 && aligned16(out) && aligned16(in);
    /* threads along the channels: enough for one pass over a row, 32 .. 256 */
    int tx = (int)ceil_div(vec ? C / V : C, 32) * 32;
    if (tx > 256) tx = 256;
    if (tx < 32) tx = 32;
    const int ty = 256 / tx;
    dim3 block(tx, ty), grid(ceil_div(rows, ty));
    if (vec)
        k_grid_transpose<E, 1><<<grid, block, 0, im->stream>>>(out, ldo, in, ldi, rows, H, W, C, accumulate);
    else
        k_grid_transpose<E, 0><<<grid, block, 0, im->stream>>>(out, ldo, in, ldi, rows, H, W, C, accumulate);
    LAUNCH_CHECK("k_grid_transpose");
}

void cu_grid_transpose(Backend *bk, float *out, int ldo, const float *in, int ldi, int B, int H, int W, int C, int f32,
                       int accumulate) {
    CudaImpl *im = IMPL(bk);
    if ((long)B * H * W <= 0 || C <= 0) return;
    if (f32 || !im->bf16)
        grid_transpose_launch<float>(im, out, ldo, in, ldi, B, H, W, C, accumulate);
    else
        grid_transpose_launch<bf16>(im, (bf16 *)out, ldo, (const bf16 *)in, ldi, B, H, W, C, accumulate);
}
