/* backend.h - the one table of operations that models are written against.
 *
 * Two implementations: src/cpu/ (the fp32 reference, OpenBLAS + OpenMP) and
 * cuda/ (bf16 or fp32). Model code never dereferences a tensor pointer:
 * tensors live in backend memory ("device memory"; plain host memory on the
 * CPU backend) and only the backend touches their contents.
 *
 * Conventions, for every op:
 *  - All tensors are row-major and contiguous unless a leading dimension
 *    (ld*) is given: "x[M, C] with ldx" means row m starts at x + m*ldx.
 *  - Shapes: B batch, N tokens, D width, M = B*N rows.
 *  - Parameter gradients ACCUMULATE (+=): the trainer zeroes them once per
 *    step. Activation gradients OVERWRITE (=), except where the comment says
 *    "+=" (the residual-stream gradient, which LayerNorm backward adds into;
 *    diag_bwd's input gradient, the skip's share added to another op's).
 *  - Element types. These are always fp32: parameters and their gradients
 *    (w, b, dw, db, theta*, gamma, beta, d*), optimizer moments, norm
 *    statistics (mean, rstd, rms), loss, probs, targets, drop-path scales,
 *    the sumsq accumulator, the scan's decays and their gradients (a, da:
 *    per-token or shared) and LRU's lam, beff and their gradients. Every
 *    other tensor (activations and their gradients, logits included) has
 *    the backend's activation element type, act_elem bytes wide: 4 (fp32)
 *    on the CPU backend; the CUDA backend may store bf16 (2). Such pointers
 *    are typed float* for readability only; model code offsets them with
 *    ACT_AT(bk, p, n), never with p + n.
 */
#ifndef HGRN_BACKEND_H
#define HGRN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Backend Backend;

#define HGRN_GRAPH_SLOTS 4
#define HGRN_IDLE_SLOTS 2

/* AdamW hyper-parameters for one update of one tensor. */
typedef struct {
    float lr, beta1, beta2, eps;
    float weight_decay; /* decoupled: p -= lr*wd*p (0 for the no-decay group) */
    int step; /* 1-based step count, for bias correction */
    float max_grad_norm; /* global-norm clip threshold; <= 0 disables clipping */
    /* Optional device array {lr, 1 - beta1^step, 1 - beta2^step}: when set it
     * replaces lr and step, so a recorded graph can run with a new learning
     * rate and step count (the caller uploads them before each step). */
    const float *sched;
} AdamWArgs;

struct Backend {
    const char *name; /* "cpu" or "cuda" */
    void *impl; /* implementation state */
    size_t act_elem; /* bytes per activation element (4 or 2) */

    /* ---- memory ---- */
    void *(*alloc)(Backend *, size_t bytes); /* zero-filled; aborts with a message on failure */
    /* As alloc, but NULL when the memory is not there, *avail then set to the
     * bytes the device has free (0 where unknown), so that the caller can say
     * what would fit (model_create: a batch size); other failures abort. */
    void *(*try_alloc)(Backend *, size_t bytes, size_t *avail);
    void (*free)(Backend *, void *p);
    void (*zero)(Backend *, void *p, size_t bytes);
    /* Host -> device. The host buffer may be reused or freed as soon as the call
     * returns; the copy may still be in flight (the CUDA backend stages large
     * pageable buffers through pinned memory and returns before the DMA ends),
     * but every later op on the backend sees the data, and to_host / sync wait
     * for it. Nothing stays registered or pinned against the caller's memory. */
    void (*to_device)(Backend *, void *dst, const void *host_src, size_t bytes);
    void (*to_host)(Backend *, void *host_dst, const void *src, size_t bytes);
    void (*copy)(Backend *, void *dst, const void *src, size_t bytes);
    void (*sync)(Backend *);
    void (*destroy)(Backend *);
    /* The model's parameters are one contiguous fp32 block [base, base+n):
     * called once after layout and again after every host-side write to it
     * (init, checkpoint load), so a backend that computes with a lower-precision
     * copy of the weights can (re)build it. CPU: no-op. */
    void (*params_changed)(Backend *, const float *base, size_t n);
    /* Device memory this process holds now, in bytes (CUDA: total - free as the
     * driver reports it, context included); NULL on the CPU backend. */
    size_t (*mem_in_use)(Backend *);
    /* Host memory for buffers uploaded every step (the loader's ring of
     * batches): page-locked (cudaHostAlloc) on CUDA so that uploads from it
     * run asynchronously; plain zeroed heap memory on the CPU backend. Exits
     * with a message when out of memory. Context-free on purpose: they are
     * handed to the loader as they are. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* Upload without waiting, overlapping the device work already queued
     * (CUDA: on a separate copy stream when src is page-locked; otherwise
     * the same as to_device). src must stay untouched, and dst unread,
     * until copy_fence has been called and the work after it has run. */
    void (*to_device_async)(Backend *, void *dst, const void *host_src, size_t bytes);
    /* Make every device op queued from now on wait for the async uploads so far. */
    void (*copy_fence)(Backend *);
    /* Block the host until the uploads fenced by the last copy_fence have
     * landed, so their host buffers may be reused (CPU: nothing to wait for). */
    void (*copy_wait)(Backend *);
    /* Device -> page-locked host memory without waiting: dst is valid after the
     * next sync (CPU: at once). */
    void (*to_host_async)(Backend *, void *host_dst, const void *src, size_t bytes);

    /* ---- whole-step capture (CUDA graphs); all NULL where unsupported ----
     * graph_begin starts recording: the ops issued until graph_end(slot) are
     * stored in graph `slot` (0 .. HGRN_GRAPH_SLOTS-1) instead of running.
     * While recording nothing may wait for the device: uploads must come from
     * host_alloc memory (it is read each time the graph runs, so the caller
     * refills it before each launch), downloads use to_host_async, copy_fence
     * is deferred to graph_launch, and scratch space must already be large
     * enough (record after one eager step of the same shapes). graph_launch
     * fences the async uploads, then queues the recorded ops; it returns 0, or
     * -1 when the slot holds no graph (never recorded, or dropped because
     * params_changed reallocated what the graph points at). */
    void (*graph_begin)(Backend *);
    void (*graph_end)(Backend *, int slot);
    int (*graph_launch)(Backend *, int slot);
    /* Destroys every recorded graph (graph_launch then returns -1 for every
     * slot). The graphs belong to the backend, not to the model they were
     * recorded over: whoever starts recording steps of another model,
     * optimizer or batch size (step_init) drops them first, since a graph
     * replays its recording's memory addresses, which may have been freed. */
    void (*graph_drop)(Backend *);

    /* ---- device idle time between steps (how input-bound a run is) ----
     * idle_begin(slot) marks where the device work queued so far ends,
     * idle_end(slot) where the next work starts (after what it waits for:
     * its inputs); idle_seconds(slot), once the device has passed both, is
     * the time between them. Slots 0 .. HGRN_IDLE_SLOTS-1, so that one gap
     * can be read while the next is being marked. NULL on backends whose ops
     * run on the calling thread (CPU: the host's own waits for data are the
     * idle time). */
    void (*idle_begin)(Backend *, int slot);
    void (*idle_end)(Backend *, int slot);
    double (*idle_seconds)(Backend *, int slot);

    /* ---- GEMM (Linear, PyTorch weight layout W[N, K] = out x in) ----
     * out[M,N] = inp[M,K] . W^T + bias   (bias may be NULL)
     * gemm_samples: 0, or S > 0 when the rows of the next matmul_fwd calls
     * are S samples' rows, M / S each, in order (the model sets it before
     * every forward: B in evaluation, 0 in training). The CPU backend then
     * gives each sample a GEMM call of its own, so that a sample's outputs
     * do not depend on the batch it is in nor on the thread count (a BLAS
     * computes a row with other instructions depending on the call's shape
     * and where the row falls in its tiles). The CUDA backend ignores it. */
    int gemm_samples;
    /* hgru2_chunk: how hgru2_fwd / hgru2_bwd cut the sequence on a backend
     * that can evaluate it in chunks (CUDA; the CPU backend ignores it):
     * 0 (the default) the backend picks, -1 never chunked, L > 0 chunks of
     * L tokens (rounded up to the kernel's tile). A measurement switch
     * (hgrn bench --mixers --hgru2-chunk); every setting computes the same
     * function, to rounding. */
    int hgru2_chunk;
    void (*matmul_fwd)(Backend *, float *out, const float *inp, const float *w, const float *bias, int M, int K, int N);
    /* dinp[M,K] = dout . W (overwrite; dinp may be NULL),
     * dw[N,K] += dout^T . inp, dbias[N] += column sums of dout (may be NULL) */
    void (*matmul_bwd)(Backend *, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                       const float *w, int M, int K, int N);

    /* ---- norms ----
     * LayerNorm over the last C: out = (x-mean)*rstd*w + b, eps 1e-5 (PyTorch's).
     * mean[M], rstd[M] saved for backward. */
    void (*layernorm_fwd)(Backend *, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int M, int C);
    /* dinp += ..., dw += ..., db += ... */
    void (*layernorm_bwd)(Backend *, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int M, int C);
    /* SimpleRMSNorm (no weights): out = x / (||x||_2 / sqrt(C) + 1e-8); rms[M] saved
     * (rms = ||x||_2/sqrt(C)). */
    void (*rmsnorm_fwd)(Backend *, float *out, float *rms, const float *inp, int M, int C);
    void (*rmsnorm_bwd)(Backend *, float *dinp, const float *dout, const float *inp, const float *rms, int M,
                        int C); /* dinp = ... */

    /* ---- LayerNorm then SiLU output gate, fused (the HGRU1 mixer's tail) ----
     * z[m,c] = SiLU(gate[m*ldg+c]) * (LayerNorm(f)[m,c] as layernorm_fwd with w, b);
     * f and z are [M,C] contiguous; mean[M], rstd[M] saved for backward. The
     * normalised f is never stored: the backward recomputes it. */
    void (*ln_gate_fwd)(Backend *, float *z, float *mean, float *rstd, const float *f, const float *w, const float *b,
                        const float *gate, int ldg, int M, int C);
    /* df = ... and dgate[m*ldg+c] = ... (overwrite); dw += ..., db += ... */
    void (*ln_gate_bwd)(Backend *, float *df, float *dgate, float *dw, float *db, const float *dz, const float *f,
                        const float *w, const float *b, const float *gate, int ldg, const float *mean,
                        const float *rstd, int M, int C);

    /* ---- gates ----
     * out[m,c] = SiLU(a[m*lda+c]) * b[m*ldb+c], out is [M,C] contiguous.
     * Serves the GLU (a = l1 output, b = l2 output) and the HGRU1 output gate. */
    void (*silu_mul_fwd)(Backend *, float *out, const float *a, int lda, const float *b, int ldb, int M, int C);
    /* da[m*lda+c] = ..., db[m*ldb+c] = ... (overwrite; same strides as a and b) */
    void (*silu_mul_bwd)(Backend *, float *da, float *db, const float *dout, const float *a, int lda, const float *b,
                         int ldb, int M, int C);

    /* ---- HGRU1 bidirectional complex scan (DESIGN.md section 4) ----
     * Per image b, token t, channel j in [0,D):
     *   c_t[j]  = SiLU(xc[t, 2j]) + i*SiLU(xc[t, 2j+1])      (xc row stride ld)
     *   lam_t[j] = beta[j] + (1-beta[j]) * sigmoid(xl[t, j]) (xl row stride ld)
     *   h_t = lam_t e^{i theta_f} h_{t-1} + (1-lam_t) c_t, h_0 = 0
     *   r_t = lam_t e^{i theta_r} r_{t+1} + (1-lam_t) c_t, r_{N+1} = 0
     *   out[t, j] = Re(h_t + r_t), out[t, D + j] = Im(h_t + r_t)   (out is [M, 2D])
     * xc and xl point into the same in-projection output in the model, hence ld. */
    void (*hgru1_fwd)(Backend *, float *out, const float *xc, const float *xl, int ld, const float *theta_f,
                      const float *theta_r, const float *beta, int B, int N, int D);
    /* dxc (row stride ld, [.., 2D] interleaved like xc) and dxl (stride ld) are
     * OVERWRITTEN with gradients of the pre-activations; dtheta_f[D], dtheta_r[D],
     * dbeta[D] ACCUMULATE. Recomputes the scan states (nothing saved by fwd). */
    void (*hgru1_bwd)(Backend *, float *dxc, float *dxl, float *dtheta_f, float *dtheta_r, float *dbeta,
                      const float *dout, const float *xc, const float *xl, int ld, const float *theta_f,
                      const float *theta_r, const float *beta, int B, int N, int D);

    /* ---- hierarchical lower bounds ----
     * P = softmax(gamma[L,D]) over the layer axis (per column j);
     * beta[0,j] = 0, beta[k,j] = sum_{i<k} P[i,j]. */
    void (*lower_bounds_fwd)(Backend *, float *beta, const float *gamma, int L, int D);
    void (*lower_bounds_bwd)(Backend *, float *dgamma /* += */, const float *dbeta, const float *gamma, int L, int D);

    /* ---- input and pooling ----
     * uint8 NCHW images -> float, normalised per channel: (x/255 - mean[c]) / std[c].
     * mean/std are HOST arrays of C floats. */
    void (*normalize_u8)(Backend *, float *out, const uint8_t *img, const float *mean, const float *std, int B, int C,
                         int H, int W);
    /* out[B, (H/p)*(W/p), p*p*C] from img[B,C,H,W]: 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)'.
     * H and W should be multiples of p; otherwise the bottom/right remainder is
     * dropped (and gets a zero gradient). */
    void (*patchify_fwd)(Backend *, float *out, const float *img, int B, int C, int H, int W, int p);
    void (*patchify_bwd)(Backend *, float *dimg /* = */, const float *dout, int B, int C, int H, int W, int p);
    /* normalize_u8 and patchify_fwd in one pass, uint8 NCHW -> out[B, (H/p)*(W/p), p*p*C]
     * (the model's input path: no normalised full-size image in between).
     * mean/std are HOST arrays of C floats. */
    void (*patchify_u8)(Backend *, float *out, const uint8_t *img, const float *mean, const float *std, int B, int C,
                        int H, int W, int p);
    /* out[B,D] = mean over N of x[B,N,D] */
    void (*meanpool_fwd)(Backend *, float *out, const float *x, int B, int N, int D);
    void (*meanpool_bwd)(Backend *, float *dx /* = */, const float *dout, int B, int N, int D);

    /* ---- residual with per-sample drop path ----
     * out[b, :S] = x[b, :S] + scale[b] * f[b, :S]; scale is a device array of B
     * floats (0 or 1/(1-p) when training with drop path), or NULL for scale 1.
     * out may be x (in place); out of place it saves the model a copy of x. */
    void (*residual_fwd)(Backend *, float *out, const float *x, const float *f, const float *scale, int B, int S);
    /* df[b,:] = scale[b] * dx[b,:] (overwrite) */
    void (*residual_bwd)(Backend *, float *df, const float *dx, const float *scale, int B, int S);
    /* The residual add and the next sublayer's pre-norm in one pass: out as
     * residual_fwd(out, x, f, scale, B, N * D), then ln, mean, rstd as
     * layernorm_fwd(ln, mean, rstd, out, w, b, B * N, D) on the out just
     * stored (the same rounding as the two ops). out must not alias x or f. */
    void (*residual_ln_fwd)(Backend *, float *out, float *ln, float *mean, float *rstd, const float *x, const float *f,
                            const float *scale, const float *w, const float *b, int B, int N, int D);
    /* Its mirror in the backward: a branch's pre-norm backward and the next
     * branch's drop-path scaling in one pass: layernorm_bwd(dinp, dw, db, dout,
     * inp, w, mean, rstd, B * N, C), then residual_bwd(df, dinp, scale, B, N * C)
     * on the dinp just stored (the same rounding as the two ops). df must not
     * alias dinp, dout or inp. */
    void (*ln_residual_bwd)(Backend *, float *dinp, float *df, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean, const float *rstd, const float *scale,
                            int B, int N, int C);

    /* ---- loss ----
     * Softmax cross-entropy against soft targets (label smoothing and mixup are
     * folded into targets[B,C] by the caller): loss[b] = -sum_c t[b,c] log p[b,c].
     * probs[B,C] saved for backward. */
    void (*xent_fwd)(Backend *, float *loss, float *probs, const float *logits, const float *targets, int B, int C);
    /* dlogits = (probs - targets) * dloss  (dloss = 1/B for a mean loss); this is
     * the gradient only when every target row sums to 1, as the caller ensures. */
    void (*xent_bwd)(Backend *, float *dlogits, const float *probs, const float *targets, float dloss, int B, int C);

    /* ---- reductions and optimizer ----
     * *acc += sum x[i]^2 (acc is one device float; accumulate in double inside) */
    void (*sumsq)(Backend *, float *acc, const float *x, size_t n);
    /* AdamW on one tensor. grad_norm_sq is a device float holding the global
     * squared gradient norm; the update uses g * min(1, max_norm / (sqrt(gn)+1e-6)).
     * A non-finite grad_norm_sq (a NaN or Inf gradient anywhere) leaves param, m
     * and v untouched: the step is skipped on the device, so a bad step inside a
     * recorded graph cannot damage the weights before the host sees the loss. */
    void (*adamw)(Backend *, float *param, const float *grad, float *m, float *v, size_t n, const AdamWArgs *args,
                  const float *grad_norm_sq);
    /* x[i] *= s  (used to scale gradients, e.g. distributed averaging) */
    void (*scale)(Backend *, float *x, float s, size_t n);
    /* Model EMA (timm's ModelEmaV2): avg[i] = d * avg[i] + (1 - d) * w[i] with
     * d = *decay, one device float read when the op runs, so that a recorded
     * step takes the current decay (it changes during the EMA's warm-up). */
    void (*ema_update)(Backend *, float *avg, const float *w, size_t n, const float *decay);

    /* ---- HGRU2 bidirectional outer-product scan (DESIGN.md section 4) ----
     * x[M, 3D] (row stride ld >= 3D) is the fused in-projection output, in the
     * official order [v | q | f]. Per image b, token t, head h (heads of e
     * channels, D = H*e; c = h*e + i indexes the row of a state, h*e + j its column):
     *   v_t[j] = SiLU(x[t, h*e+j]),  q_t[i] = sigmoid(x[t, D+h*e+i]),
     *   lam_t[i] = beta[c] + (1-beta[c]) * sigmoid(x[t, 2D+h*e+i]),  k_t = 1 - lam_t
     *   S_t = Diag(lam_t) S_{t-1} + k_t v_t^T   (t = 0..N-1, S_{-1} = 0)
     *   R_t = Diag(lam_t) R_{t+1} + k_t v_t^T   (t = N-1..0, R_N = 0; both include token t)
     *   out[t, h*e+j] = sum_i q_t[i] (S_t + R_t)[i][j]      (out is [M, D] contiguous)
     * Gated linear attention (q = output gate, k = 1 - lam, v = input); the
     * backends may evaluate it recurrently or in chunked matrix form. */
    void (*hgru2_fwd)(Backend *, float *out, const float *x, int ld, const float *beta, int B, int N, int D, int e);
    /* dx (row stride ld, the 3D columns of x's layout) is OVERWRITTEN with the
     * gradients of the three pre-activations; dbeta[D] ACCUMULATES. Recomputes
     * the states (nothing saved by fwd). */
    void (*hgru2_bwd)(Backend *, float *dx, float *dbeta, const float *dout, const float *x, int ld, const float *beta,
                      int B, int N, int D, int e);

    /* ---- element-wise linear recurrence (the scan LRU, minGRU and minLSTM share) ----
     * Per image b, channel j in [0, D), token t in [0, N):
     *   h_t = a_t * h_{t-1} + x_t    (forward, h_{-1} = 0)
     *   r_t = a_t * r_{t+1} + x_t    (reverse, r_N = 0; the same a_t and x_t)
     *   out_t = h_t (dirs SCAN_FORWARD: causal), r_t (SCAN_REVERSE) or h_t + r_t (SCAN_BOTH)
     * Real (complex = 0): one value per channel. Complex-diagonal (complex = 1):
     * two, (re, im) interleaved (channel j at [2j], [2j+1] of a row), and * is
     * the complex product. W = D (real) or 2D (complex) values per row:
     *   x[M, W] with row stride ldx >= W; out[M, W] contiguous;
     *   a[M, W] with row stride lda >= W: a per-token decay, FP32 ON EVERY
     *   BACKEND (not the activation type: a decay near 1 must not be rounded
     *   to bf16, where 0.999 becomes 1.0 and the memory of the recurrence
     *   changes from ~1000 tokens to forever); or
     *   lda == 0: a is one fp32 row of W values shared by every token and image
     *   (a decay that does not depend on the input, as LRU's lambda).
     * The backends may evaluate it sequentially or in chunks. */
    void (*scan_fwd)(Backend *, float *out, const float *a, int lda, const float *x, int ldx, int B, int N, int D,
                     int complex, int dirs);
    /* dx (stride ldx) is OVERWRITTEN with dL/dx. lda > 0: da (fp32, stride lda)
     * is OVERWRITTEN with dL/da; lda == 0: da is fp32 [W] and ACCUMULATES dL/da
     * summed over tokens and images. A complex gradient is dL/dRe + i dL/dIm
     * (for the forward direction: dL/dx_t = g_t + conj(a_{t+1}) dL/dx_{t+1},
     * dL/da_t = dL/dx_t conj(h_{t-1})). Recomputes the states (nothing is
     * saved by fwd). */
    void (*scan_bwd)(Backend *, float *dx, float *da, const float *dout, const float *a, int lda, const float *x,
                     int ldx, int B, int N, int D, int complex, int dirs);

    /* ---- the gates of minGRU and minLSTM (DESIGN.md section 4) ----
     * From the in-projection p (row stride ldp >= 2E or 3E), per row m and
     * channel c in [0, E), the scan's decay and input:
     *   MINGATE_GRU,  p = [z | h]:      a = sigmoid(-z),  x = sigmoid(z) h
     *   MINGATE_LSTM, p = [f | i | h]:  d = log sigmoid(f) - log sigmoid(i)
     *                                     = softplus(-i) - softplus(-f),
     *                                   a = sigmoid(d) = sf / (sf + si),
     *                                   x = sigmoid(-d) h = si / (sf + si) h
     * (sf = sigmoid(f), si = sigmoid(i); the normalisation is taken in log
     * space, so it stays finite where sf and si both underflow). Every
     * sigmoid is evaluated from exp(-|.|): a decay is as accurate near 0 as
     * near 1. a: fp32 [M, E] contiguous (the scan's per-token decay, fp32 on
     * every backend); x: [M, E] contiguous activations. */
    void (*mingate_fwd)(Backend *, float *a, float *x, const float *p, int ldp, int M, int E, int kind);
    /* dp (row stride ldp, p's 2E or 3E columns) is OVERWRITTEN with dL/dp from
     * da (fp32 [M, E]) and dx ([M, E]), the scan's input gradients. */
    void (*mingate_bwd)(Backend *, float *dp, const float *da, const float *dx, const float *p, int ldp, int M, int E,
                        int kind);

    /* ---- LRU: the decay and the normalised input matrix from the parameters ----
     * Per state k in [0, S) (every array fp32):
     *   r_k = exp(-exp(nu[k])),  gamma_k = sqrt(1 - r_k^2),
     *   lam[2k] = r_k cos(theta[k]),  lam[2k+1] = r_k sin(theta[k])      lam [2S]
     *   beff[(2k+v) H + h] = gamma_k b[(2k+v) H + h]   (v = 0, 1)          beff, b [2S, H]
     * b holds B's rows (Re B_k, Im B_k) interleaved, so that one GEMM with
     * beff gives gamma (B u) as (re, im) pairs: the scan's complex input. */
    void (*lru_params_fwd)(Backend *, float *lam, float *beff, const float *nu, const float *theta, const float *b,
                           int S, int H);
    /* dnu[S], dtheta[S] and db[2S, H] ACCUMULATE, from dlam [2S] (dL/dRe +
     * i dL/dIm of lam) and dbeff [2S, H]. */
    void (*lru_params_bwd)(Backend *, float *dnu, float *dtheta, float *db, const float *dlam, const float *dbeff,
                           const float *nu, const float *theta, const float *b, int S, int H);

    /* ---- a diagonal skip (LRU's D u) ----
     * out[m, c] += d[c] * x[m, c]; out and x [M, C] contiguous, d fp32 [C]. */
    void (*diag_fwd)(Backend *, float *out, const float *x, const float *d, int M, int C);
    /* dx[m, c] += d[c] * dout[m, c] (ACCUMULATES: the skip's share of an input
     * gradient that another op wrote first); dd[c] += sum_m dout[m, c] x[m, c]. */
    void (*diag_bwd)(Backend *, float *dx, float *dd, const float *dout, const float *x, const float *d, int M, int C);

    /* ---- batch norm (model.norm = batch; DESIGN.md section 4) ----
     * Per channel c of x[M, C], over all M rows (the batch and the tokens,
     * as PyTorch's BatchNorm1d on [B, C, N]), eps 1e-5:
     *   training != 0: mean[c] and var[c] (biased) of the rows,
     *     rstd[c] = 1 / sqrt(var[c] + eps), and the running statistics
     *     updated as PyTorch does: rmean = (1 - momentum) rmean + momentum
     *     mean, rvar = (1 - momentum) rvar + momentum var M / (M - 1)
     *     (unbiased; var itself when M = 1);
     *   training == 0: mean = rmean, rstd = 1 / sqrt(rvar + eps), nothing updated;
     *   out[m, c] = (x[m, c] - mean[c]) rstd[c] w[c] + b[c].
     * mean[C], rstd[C] (fp32) are saved for the backward; rmean, rvar fp32 [C]. */
    void (*batchnorm_fwd)(Backend *, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, float *rmean, float *rvar, float momentum, int training, int M, int C);
    /* The backward of the training-mode forward (the statistics depend on x):
     * with xh = (x - mean) rstd and g = dout w,
     *   dinp += rstd (g - mean_m(g) - xh mean_m(g xh)),
     * dw += sum_m dout xh, db += sum_m dout (means and sums over the M rows). */
    void (*batchnorm_bwd)(Backend *, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int M, int C);
    /* cuDNN's batch norm under the same two contracts, to be timed and tested
     * against the backend's own (hgrn bench --ops, test_lra_cuda); NULL unless
     * the CUDA backend was built with cuDNN (and on the CPU backend and the op
     * timer). Models never call them. */
    void (*batchnorm_fwd_cudnn)(Backend *, float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, float *rmean, float *rvar, float momentum, int training, int M, int C);
    void (*batchnorm_bwd_cudnn)(Backend *, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                const float *w, const float *mean, const float *rstd, int M, int C);

    /* ---- token grids (model.scan2d) ----
     * Per image b of B, a grid of H x W tokens stored row by row (token
     * h W + w): out[b, w H + h, c] = in[b, h W + w, c] for c in [0, C), the
     * same tokens column by column. The inverse is the same op with H and W
     * swapped. in rows of stride ldi >= C, out rows of stride ldo >= C; they
     * may not overlap. f32 != 0: the elements are fp32 (a scan's decays)
     * whatever the activation type. accumulate != 0: out += instead of =. */
    void (*grid_transpose)(Backend *, float *out, int ldo, const float *in, int ldi, int B, int H, int W, int C,
                           int f32, int accumulate);
};

/* scan_fwd / scan_bwd directions */
enum { SCAN_FORWARD = 1, SCAN_REVERSE = 2, SCAN_BOTH = 3 };
/* mingate_fwd / mingate_bwd kinds */
enum { MINGATE_GRU = 1, MINGATE_LSTM = 2 };

/* Address of element n of an activation tensor. */
#define ACT_AT(bk, p, n) ((float *)((char *)(p) + (size_t)(n) * (bk)->act_elem))

/* Constructors. Each returns NULL and writes a message to err on failure. */
Backend *backend_cpu_create(int num_threads, char *err, size_t errlen);
/* CUDA (cuda/): bf16 != 0 stores activations in bf16 (act_elem 2) with fp32
 * accumulation; bf16 == 0 runs everything in fp32 (--precision fp32).
 * gemm_tune != 0 times cuBLASLt's candidate algorithms the first time each
 * GEMM shape runs and keeps the fastest (faster; the pick rests on timings,
 * so two processes may pick differently and differ in the last bits);
 * gemm_tune == 0 keeps the heuristic's first algorithm, bitwise reproducible
 * across processes (config key train.gemm_tune). */
Backend *backend_cuda_create(int device, int bf16, int gemm_tune, char *err, size_t errlen);
int backend_cuda_available(void); /* 1 when built with CUDA and a GPU is visible */

#ifdef __cplusplus
}
#endif
#endif
