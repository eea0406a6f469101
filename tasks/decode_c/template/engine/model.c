/* The inference engine: greedy decoding of a batch of sequences (baseline).
 *
 * This baseline is correct and deliberately naive: it handles the rows of a batch one after
 * the other, and for every row and every token it dequantises every weight matrix it touches
 * into a fresh buffer before multiplying, so a batch of B rows costs B times one row.
 *
 * All arithmetic is double. Each dot product sums its terms in ascending index order; an
 * engine that keeps, for every row, the same operations in the same order gives the same bits
 * whatever it shares across rows (dequantised values are exact in double: see weights.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "config.h"
#include "engine.h"
#include "numerics.h"
#include "weights.h"

#define KV_GROUP (N_HEADS / N_KV_HEADS)

typedef struct {
    double *keys[N_LAYERS];   /* capacity x KV_DIM */
    double *values[N_LAYERS]; /* capacity x KV_DIM */
    int length;
    int capacity;
    double *logits; /* VOCAB: the logits after this row's last token */
} Sequence;

struct Engine {
    Weights w;
    int loaded;
    Sequence *seqs;
    int n_seqs;
};

static void fail(char *err, size_t cap, const char *message) { snprintf(err, cap, "%s", message); }

/* -- the model, one row at a time ------------------------------------------------------------ */

/* y = m @ x: dequantise the whole matrix, then one dot product per output row. */
static int matvec(const QMat *m, const double *x, double *y) {
    double *deq = malloc((size_t)m->rows * (size_t)m->cols * sizeof *deq);
    if (!deq) return -1;
    for (int r = 0; r < m->rows; r++) {
        for (int c = 0; c < m->cols; c++) deq[(size_t)r * m->cols + c] = qmat_value(m, r, c);
    }
    for (int r = 0; r < m->rows; r++) {
        const double *row = deq + (size_t)r * m->cols;
        double acc = 0.0;
        for (int c = 0; c < m->cols; c++) acc += row[c] * x[c];
        y[r] = acc;
    }
    free(deq);
    return 0;
}

static void rmsnorm(const double *x, const float *gain, double *out) {
    double ss = 0.0;
    for (int i = 0; i < D_MODEL; i++) ss += x[i] * x[i];
    double scale = sqrt(ss / D_MODEL + NORM_EPS);
    for (int i = 0; i < D_MODEL; i++) out[i] = x[i] / scale * (double)gain[i];
}

static double silu(double x) { return x / (1.0 + det_exp(-x)); }

static int grow(Sequence *s) {
    int capacity = s->capacity ? 2 * s->capacity : 64;
    for (int l = 0; l < N_LAYERS; l++) {
        double *k = realloc(s->keys[l], (size_t)capacity * KV_DIM * sizeof *k);
        if (!k) return -1;
        s->keys[l] = k;
        double *v = realloc(s->values[l], (size_t)capacity * KV_DIM * sizeof *v);
        if (!v) return -1;
        s->values[l] = v;
    }
    s->capacity = capacity;
    return 0;
}

/* One row's attention mix for its query q at position s->length (the keys and values of this
 * position already appended). ALiBi: head h's score for an earlier position t is lowered by
 * slope_h * (distance), slope_h = 2**-(h+1). `scores` has room for s->length + 1 values. */
static void attend(const Sequence *s, int l, const double *q, double *scores, double *mixed) {
    int pos = s->length;
    for (int head = 0; head < N_HEADS; head++) {
        int kv = head / KV_GROUP;
        const double *qh = q + head * HEAD_DIM;
        double slope = 1.0 / (double)(2 << head);
        double best = -INFINITY;
        for (int t = 0; t <= pos; t++) {
            const double *kt = s->keys[l] + (size_t)t * KV_DIM + kv * HEAD_DIM;
            double dot = 0.0;
            for (int d = 0; d < HEAD_DIM; d++) dot += qh[d] * kt[d];
            scores[t] = dot * 0.25 - slope * (double)(pos - t); /* 0.25 = 1 / sqrt(HEAD_DIM) */
            if (scores[t] > best) best = scores[t];
        }
        double total = 0.0;
        for (int t = 0; t <= pos; t++) {
            scores[t] = det_exp(scores[t] - best);
            total += scores[t];
        }
        double *mh = mixed + head * HEAD_DIM;
        for (int d = 0; d < HEAD_DIM; d++) mh[d] = 0.0;
        for (int t = 0; t <= pos; t++) {
            const double *vt = s->values[l] + (size_t)t * KV_DIM + kv * HEAD_DIM;
            double p = scores[t] / total;
            for (int d = 0; d < HEAD_DIM; d++) mh[d] += p * vt[d];
        }
    }
}

/* Attention of one row: project, append this position's key and value, attend, project. */
static int attention(Sequence *s, int l, const LayerWeights *L, const double *h, double *out) {
    double q[D_MODEL], k[KV_DIM], v[KV_DIM], mixed[D_MODEL];
    if (matvec(&L->wq, h, q) || matvec(&L->wk, h, k) || matvec(&L->wv, h, v)) return -1;
    memcpy(s->keys[l] + (size_t)s->length * KV_DIM, k, sizeof k);
    memcpy(s->values[l] + (size_t)s->length * KV_DIM, v, sizeof v);
    double *scores = malloc((size_t)(s->length + 1) * sizeof *scores);
    if (!scores) return -1;
    attend(s, l, q, scores, mixed);
    free(scores);
    return matvec(&L->wo, mixed, out);
}

static int feed_forward(const LayerWeights *L, const double *h, double *out) {
    double gate[D_FF], up[D_FF];
    if (matvec(&L->w_gate, h, gate) || matvec(&L->w_up, h, up)) return -1;
    for (int i = 0; i < D_FF; i++) gate[i] = silu(gate[i]) * up[i];
    return matvec(&L->w_down, gate, out);
}

/* Run one token of one row through the model; keep its logits when asked. */
static int forward(Engine *e, Sequence *s, int token, int want_logits) {
    const Weights *w = &e->w;
    double x[D_MODEL], h[D_MODEL], delta[D_MODEL];
    if (s->length == s->capacity && grow(s)) return -1;
    for (int i = 0; i < D_MODEL; i++) x[i] = qmat_value(&w->embed, token, i);
    for (int l = 0; l < N_LAYERS; l++) {
        const LayerWeights *L = &w->layers[l];
        rmsnorm(x, L->attn_norm, h);
        if (attention(s, l, L, h, delta)) return -1;
        for (int i = 0; i < D_MODEL; i++) x[i] = x[i] + delta[i];
        rmsnorm(x, L->ffn_norm, h);
        if (feed_forward(L, h, delta)) return -1;
        for (int i = 0; i < D_MODEL; i++) x[i] = x[i] + delta[i];
    }
    s->length += 1;
    if (want_logits) {
        rmsnorm(x, w->final_norm, h);
        if (matvec(&w->head, h, s->logits)) return -1;
    }
    return 0;
}

/* -- the calls serve.c makes ------------------------------------------------------------------ */

Engine *engine_create(void) { return calloc(1, sizeof(Engine)); }

int engine_load(Engine *e, const char **name, char *err, size_t cap) {
    engine_reset(e);
    if (e->loaded) weights_free(&e->w);
    e->loaded = 0;
    if (weights_load(&e->w, WEIGHT_SEED)) {
        fail(err, cap, "out of memory generating the weights");
        return -1;
    }
    e->loaded = 1;
    *name = "baseline";
    return 0;
}

void engine_reset(Engine *e) {
    for (int i = 0; i < e->n_seqs; i++) {
        for (int l = 0; l < N_LAYERS; l++) {
            free(e->seqs[i].keys[l]);
            free(e->seqs[i].values[l]);
        }
        free(e->seqs[i].logits);
    }
    free(e->seqs);
    e->seqs = NULL;
    e->n_seqs = 0;
}

int engine_prefill(Engine *e, int batch, const int *const *prompts, const int *lens, char *err,
                   size_t cap) {
    engine_reset(e);
    if (!e->loaded) {
        fail(err, cap, "load first");
        return -1;
    }
    for (int b = 0; b < batch; b++) {
        if (lens[b] < 1) {
            fail(err, cap, "empty prompt");
            return -1;
        }
        for (int i = 0; i < lens[b]; i++) {
            if (prompts[b][i] < 0 || prompts[b][i] >= VOCAB) {
                fail(err, cap, "token id out of range");
                return -1;
            }
        }
    }
    e->seqs = calloc((size_t)(batch > 0 ? batch : 1), sizeof *e->seqs);
    if (!e->seqs) {
        fail(err, cap, "out of memory");
        return -1;
    }
    e->n_seqs = batch;
    for (int b = 0; b < batch; b++) {
        Sequence *s = &e->seqs[b];
        s->logits = malloc(VOCAB * sizeof *s->logits);
        if (!s->logits) {
            fail(err, cap, "out of memory");
            return -1;
        }
        for (int i = 0; i < lens[b]; i++) {
            if (forward(e, s, prompts[b][i], i == lens[b] - 1)) {
                fail(err, cap, "out of memory");
                return -1;
            }
        }
    }
    return 0;
}

int engine_decode(Engine *e, int batch, int steps, int *tokens, double *margins, char *err,
                  size_t cap) {
    if (batch != e->n_seqs) {
        fail(err, cap, "the engine holds a different number of rows than the last prefill");
        return -1;
    }
    for (int step = 0; step < steps; step++) {
        for (int b = 0; b < batch; b++) {
            Sequence *s = &e->seqs[b];
            int best = 0;
            for (int t = 1; t < VOCAB; t++) {
                if (s->logits[t] > s->logits[best]) best = t; /* the lowest id wins a tie */
            }
            tokens[b * steps + step] = best;
            if (margins) {
                double second = -INFINITY;
                for (int t = 0; t < VOCAB; t++) {
                    if (t != best && s->logits[t] > second) second = s->logits[t];
                }
                margins[b * steps + step] = s->logits[best] - second;
            }
            if (forward(e, s, best, 1)) {
                fail(err, cap, "out of memory");
                return -1;
            }
        }
    }
    return 0;
}
