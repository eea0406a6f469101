/* Deterministic int8 weights (frozen zone: see weights.h for the layout). */
#include "weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Variance of a uniform integer in [-127, 127]: scales are sized from it so that a layer's
 * output has roughly unit variance when its input does. */
#define Q_VAR (((255.0 * 255.0) - 1.0) / 12.0)

typedef struct {
    uint64_t state;
} Rng;

/* splitmix64: integer-only, the same stream on every machine and compiler. */
static uint64_t rng_next(Rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_unit(Rng *rng) {
    return (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

static int make_qmat(Rng *rng, QMat *m, int rows, int cols, double gain) {
    m->rows = rows;
    m->cols = cols;
    m->q = malloc((size_t)rows * (size_t)cols);
    m->scale = malloc((size_t)rows * sizeof *m->scale);
    if (!m->q || !m->scale) return -1;
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++) {
        m->q[i] = (int8_t)((int)(rng_next(rng) % 255u) - 127);
    }
    double base = gain / sqrt(Q_VAR * (double)cols);
    for (int r = 0; r < rows; r++) {
        m->scale[r] = (float)(base * (0.5 + rng_unit(rng)));
    }
    return 0;
}

static void make_norm(Rng *rng, float *gain, int width) {
    for (int i = 0; i < width; i++) gain[i] = (float)(1.0 + 0.2 * (rng_unit(rng) - 0.5));
}

static void free_qmat(QMat *m) {
    free(m->q);
    free(m->scale);
    m->q = NULL;
    m->scale = NULL;
}

int weights_load(Weights *w, uint64_t seed) {
    Rng rng = {seed};
    memset(w, 0, sizeof *w);
    /* The embedding's "input" is one-hot, so its rows get unit variance directly. */
    if (make_qmat(&rng, &w->embed, VOCAB, D_MODEL, sqrt((double)D_MODEL))) goto fail;
    for (int l = 0; l < N_LAYERS; l++) {
        LayerWeights *L = &w->layers[l];
        make_norm(&rng, L->attn_norm, D_MODEL);
        if (make_qmat(&rng, &L->wq, D_MODEL, D_MODEL, 1.0)) goto fail;
        if (make_qmat(&rng, &L->wk, KV_DIM, D_MODEL, 1.0)) goto fail;
        if (make_qmat(&rng, &L->wv, KV_DIM, D_MODEL, 1.0)) goto fail;
        if (make_qmat(&rng, &L->wo, D_MODEL, D_MODEL, 1.0)) goto fail;
        make_norm(&rng, L->ffn_norm, D_MODEL);
        if (make_qmat(&rng, &L->w_gate, D_FF, D_MODEL, 1.0)) goto fail;
        if (make_qmat(&rng, &L->w_up, D_FF, D_MODEL, 1.0)) goto fail;
        if (make_qmat(&rng, &L->w_down, D_MODEL, D_FF, 1.0)) goto fail;
    }
    make_norm(&rng, w->final_norm, D_MODEL);
    if (make_qmat(&rng, &w->head, VOCAB, D_MODEL, 3.0)) goto fail;
    return 0;
fail:
    weights_free(w);
    return -1;
}

void weights_free(Weights *w) {
    free_qmat(&w->embed);
    for (int l = 0; l < N_LAYERS; l++) {
        LayerWeights *L = &w->layers[l];
        free_qmat(&L->wq);
        free_qmat(&L->wk);
        free_qmat(&L->wv);
        free_qmat(&L->wo);
        free_qmat(&L->w_gate);
        free_qmat(&L->w_up);
        free_qmat(&L->w_down);
    }
    free_qmat(&w->head);
}
