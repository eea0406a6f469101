/* The calls harness/serve.c makes (frozen zone: any change here is rejected by the judge).
 *
 * Every call that can fail returns 0, or writes a message of at most `cap` bytes (NUL
 * included) into `err` and returns -1; serve.c answers {"ok": false, "error": err}.
 */
#ifndef DECODE_C_ENGINE_H
#define DECODE_C_ENGINE_H

#include <stddef.h>

typedef struct Engine Engine;

/* A new engine holding no weights and no sequences; NULL out of memory. */
Engine *engine_create(void);

/* Generate the weights; *name is a short description of the engine (static text). */
int engine_load(Engine *e, const char **name, char *err, size_t cap);

/* Forget every sequence, then run every prompt token of `batch` prompts (prompts[i] holds
 * lens[i] ids); each row keeps the logits that follow its last prompt token. */
int engine_prefill(Engine *e, int batch, const int *const *prompts, const int *lens, char *err,
                   size_t cap);

/* For `steps` steps, emit the argmax of every row's logits (the lowest id wins a tie) and run
 * the model on it. tokens[row * steps + step] receives the ids of the `batch` rows of the last
 * prefill; when margins is not NULL, margins[row * steps + step] receives the gap between
 * that step's largest and second largest logit. */
int engine_decode(Engine *e, int batch, int steps, int *tokens, double *margins, char *err,
                  size_t cap);

/* Forget every sequence; the next prefill starts clean. */
void engine_reset(Engine *e);

#endif
