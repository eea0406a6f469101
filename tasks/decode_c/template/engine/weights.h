/* Deterministic int8 weights (frozen zone: any change here or in weights.c is rejected).
 *
 * Every matrix is generated from WEIGHT_SEED at load time (nothing is downloaded). A matrix of
 * `rows` outputs and `cols` inputs is stored row-major as int8 values q[r * cols + c] with one
 * float scale per row: its value is (double)q * (double)scale[r], which is exact in double
 * (an 8-bit integer times a 24-bit mantissa), so every correct dequantisation has the same bits.
 * Norm gains are float.
 */
#ifndef DECODE_C_WEIGHTS_H
#define DECODE_C_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef struct {
    int8_t *q;    /* rows x cols, row-major */
    float *scale; /* rows */
    int rows, cols;
} QMat;

typedef struct {
    float attn_norm[D_MODEL];
    QMat wq; /* D_MODEL x D_MODEL */
    QMat wk; /* KV_DIM x D_MODEL */
    QMat wv; /* KV_DIM x D_MODEL */
    QMat wo; /* D_MODEL x D_MODEL */
    float ffn_norm[D_MODEL];
    QMat w_gate; /* D_FF x D_MODEL */
    QMat w_up;   /* D_FF x D_MODEL */
    QMat w_down; /* D_MODEL x D_FF */
} LayerWeights;

typedef struct {
    QMat embed; /* VOCAB x D_MODEL */
    LayerWeights layers[N_LAYERS];
    float final_norm[D_MODEL];
    QMat head; /* VOCAB x D_MODEL */
} Weights;

/* Generate every weight from `seed` (same seed, same bytes). Returns 0, or -1 out of memory. */
int weights_load(Weights *w, uint64_t seed);

/* Free what weights_load allocated. */
void weights_free(Weights *w);

/* The value of element (r, c): exact in double. */
static inline double qmat_value(const QMat *m, int r, int c) {
    return (double)m->q[(size_t)r * (size_t)m->cols + (size_t)c] * (double)m->scale[r];
}

#endif
