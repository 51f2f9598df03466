/* exact_sum.c - see exact_sum.h. */
#include "exact_sum.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

void exact_sum_clear(ExactSum *s) { memset(s, 0, sizeof *s); }

void exact_sum_add(ExactSum *s, float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t biased = (u >> 23) & 0xffu, frac = u & 0x7fffffu;
    const int neg = (u >> 31) != 0;
    if (biased == 0xffu) { /* Inf or NaN */
        s->v[frac ? EXACT_SUM_NAN : neg ? EXACT_SUM_NEGINF : EXACT_SUM_POSINF] += 1;
        return;
    }
    /* normal: (2^23 + frac) * 2^(biased - 150); subnormal: frac * 2^-149,
     * the scale of the smallest normals, so both land in bin biased - 1 */
    const double m = biased ? (double)(frac | 0x800000u) : (double)frac;
    s->v[biased ? biased - 1 : 0] += neg ? -m : m;
}

double exact_sum_value(const ExactSum *s) {
    if (s->v[EXACT_SUM_NAN] > 0 || (s->v[EXACT_SUM_POSINF] > 0 && s->v[EXACT_SUM_NEGINF] > 0)) return NAN;
    if (s->v[EXACT_SUM_POSINF] > 0) return INFINITY;
    if (s->v[EXACT_SUM_NEGINF] > 0) return -INFINITY;
    /* smallest scale first: each product is exact (an integer below 2^53
     * times a power of two), and adding the small ones first keeps them */
    double sum = 0;
    for (int b = 0; b < EXACT_SUM_BINS; b++)
        if (s->v[b] != 0) sum += ldexp(s->v[b], b - 149);
    return sum;
}
