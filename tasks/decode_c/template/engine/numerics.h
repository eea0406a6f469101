/* Deterministic elementary functions (frozen zone: any change here is rejected by the judge).
 *
 * The engine needs exp (softmax, SiLU). libm's exp may differ between C libraries, versions
 * and CPU feature paths (glibc picks an FMA variant at run time), which would make a token
 * depend on the machine. det_exp uses only +, -, *, and integer bit operations, so with
 * -ffp-contract=off (the task's build flags) it gives the same bits everywhere.
 * sqrt and division are correctly rounded by IEEE 754: they are safe as they are.
 */
#ifndef DECODE_C_NUMERICS_H
#define DECODE_C_NUMERICS_H

#include <stdint.h>
#include <string.h>

/* e**x for x in [-700, 700] (clamped outside), relative error below 1e-15. */
static inline double det_exp(double x) {
    if (x > 700.0) x = 700.0;
    if (x < -700.0) x = -700.0;
    const double inv_ln2 = 1.4426950408889634;
    const double ln2_hi = 6.93147180369123816490e-01; /* ln 2 split in two (Cody-Waite) */
    const double ln2_lo = 1.90821492927058770002e-10;
    double kd = x * inv_ln2;
    long k = (long)(kd < 0.0 ? kd - 0.5 : kd + 0.5);
    double r = (x - (double)k * ln2_hi) - (double)k * ln2_lo; /* |r| <= ln2 / 2 */
    /* Taylor series to degree 13 (remainder < 1e-17 on |r| <= 0.35), Horner order. */
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t bits = (uint64_t)(k + 1023) << 52; /* 2**k: k is in [-1010, 1010] */
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif
