/* exact_sum.h - a sum of floats kept exactly, so that its value depends only
 * on the terms, not on the order they were added in: not on how a split was
 * cut into batches, nor on how the samples were shared over ranks, nor on
 * the tree in which the ranks' parts are added.
 *
 * A finite float is m * 2^s with an integer |m| < 2^24 and s in [-149, 104];
 * v[s + 149] accumulates m. Every entry stays an integer below 2^53 in
 * magnitude, so exact in a double, while fewer than 2^29 terms are added;
 * and so two ExactSums add entry by entry (Comm.host_sum, any reduction
 * order) without rounding. NaN, +Inf and -Inf terms are counted apart. */
#ifndef HGRN_EXACT_SUM_H
#define HGRN_EXACT_SUM_H

enum { EXACT_SUM_BINS = 254, EXACT_SUM_NAN = 254, EXACT_SUM_POSINF = 255, EXACT_SUM_NEGINF = 256, EXACT_SUM_LEN = 257 };

typedef struct {
    double v[EXACT_SUM_LEN];
} ExactSum;

void exact_sum_clear(ExactSum *s);
void exact_sum_add(ExactSum *s, float x);
/* The sum as a double (NaN when a term was NaN or there were infinities of
 * both signs, else the infinity there was). The same entries give the same
 * bits; the value is within 254 double roundings of the exact sum. */
double exact_sum_value(const ExactSum *s);

#endif
