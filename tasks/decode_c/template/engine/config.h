/* Model dimensions and the weight seed (frozen zone: any change here is rejected by the judge).
 *
 * A small dense decoder: token embedding; N_LAYERS x [RMSNorm, grouped-query attention with
 * ALiBi position biases and a per-sequence KV cache, RMSNorm, SwiGLU feed-forward]; a final
 * RMSNorm and an output head over VOCAB tokens. Weights are int8 with one float scale per
 * output row (see weights.h).
 */
#ifndef DECODE_C_CONFIG_H
#define DECODE_C_CONFIG_H

#define VOCAB 3000
#define D_MODEL 64
#define N_LAYERS 3
#define N_HEADS 4
#define N_KV_HEADS 2 /* each key/value head serves N_HEADS / N_KV_HEADS query heads */
#define HEAD_DIM 16
#define KV_DIM (N_KV_HEADS * HEAD_DIM)
#define D_FF 192
#define NORM_EPS 1e-6
#define WEIGHT_SEED 20261201ULL

#endif
