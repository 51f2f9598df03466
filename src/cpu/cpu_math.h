/* cpu_math.h - element-wise math the CPU kernels share. */
#ifndef HGRN_CPU_MATH_H
#define HGRN_CPU_MATH_H

#include <stdint.h>

/* The element-wise kernels that dominate the CPU step (scan, gates) are
 * compiled twice, for AVX2 and for the baseline ISA, and picked at load time
 * (GCC function multi-versioning; needs ifunc, i.e. glibc). The build has no
 * -march, so without this they would run on 4-wide SSE2 only. Both versions
 * do the same IEEE operations per element (no FMA contraction under -std=c11),
 * so they give identical results. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && !defined(HGRN_NO_CLONES)
#define HOT_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define HOT_KERNEL
#endif

/* exp(x) for float, vectorisable inside `omp simd` loops (glibc's expf is not
 * without -ffast-math). Cephes expf: round-to-nearest range reduction with a
 * two-part ln2, degree-6 polynomial, scale by 2^n through the exponent bits.
 * Relative error about 1-2 ulp. x is clamped to [-87, 88] so 2^n stays a
 * normal float: exp saturates at ~1.6e38 and ~1.6e-38 instead of inf / 0,
 * which only matters inside sigmoid/SiLU where the difference is invisible. */
static inline float exp_f(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* n = round(x / ln2) via the 1.5*2^23 trick (exact for |t| < 2^22). */
    float t = x * 1.44269504088896341f;
    float n = (t + 12582912.0f) - 12582912.0f;
    n = n == n ? n : 0.0f; /* NaN in: keep the int conversion below defined (r stays NaN) */
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    /* 2^n through the exponent bits; the shift is done unsigned so that a NaN
     * input (n meaningless) is no undefined behaviour: p is NaN and wins */
    union {
        uint32_t u;
        float f;
    } s;
    s.u = (uint32_t)((int32_t)n + 127) << 23;
    return p * s.f;
}

/* One step of a complex-diagonal linear recurrence, in place: h = a h + u
 * with a = ar + i ai (the walks of the complex scans and of HGRU1). */
static inline void cplx_step(float ar, float ai, float ur, float ui, float *hr, float *hi) {
    const float nr = ar * *hr - ai * *hi + ur;
    const float ni = ar * *hi + ai * *hr + ui;
    *hr = nr;
    *hi = ni;
}

/* One step of its adjoint walk, in place: d = g + conj(a) d. */
static inline void cplx_adjoint_step(float ar, float ai, float gr, float gi, float *dr, float *di) {
    const float nr = gr + ar * *dr + ai * *di;
    const float ni = gi + ar * *di - ai * *dr;
    *dr = nr;
    *di = ni;
}

#endif
