/* Engine protocol server (frozen zone: any change to this file is rejected by the judge).
 *
 * Built with the engine into one program (the task's build command) and run from the
 * repository root. It reads one JSON request per line on stdin and answers one JSON line on the
 * original stdout: load, prefill {prompts}, decode {steps, margins}, reset (see the template's
 * README.md). File descriptor 1 is pointed at stderr before the engine runs, so nothing the
 * engine prints can corrupt the protocol. The judge times each request with its own clock;
 * nothing this process prints about speed is read.
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/engine.h"

/* Bounds on one request: larger ones are refused with an error reply, never allocated. */
#define MAX_ROWS 4096
#define MAX_PROMPT 65536
#define MAX_STEPS 65536
#define MAX_CELLS (1 << 24) /* rows x steps of one decode */
#define MAX_DEPTH 32
#define ERR_CAP 512

/* -- a small JSON reader: exactly what the four requests need ------------------------------- */

typedef struct {
    const char *p;
    const char *end;
    const char *start;
    char error[ERR_CAP];
} Reader;

typedef struct {
    int **rows;
    int *lens;
    int n;
} Prompts;

typedef struct {
    char op[32];
    int has_op;
    int op_is_string;
    Prompts prompts;
    int has_prompts;
    long long steps;
    int has_steps;
    int steps_ok; /* an integer that fits */
    int margins;
} Request;

static int bad(Reader *r, const char *message) {
    if (!r->error[0]) snprintf(r->error, ERR_CAP, "JSONDecodeError: %s at column %ld", message,
                               (long)(r->p - r->start));
    return -1;
}

static void skip_ws(Reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int expect(Reader *r, char c) {
    skip_ws(r);
    if (r->p >= r->end || *r->p != c) return bad(r, "unexpected character");
    r->p++;
    return 0;
}

/* A string; its first cap-1 bytes (escapes decoded, \u kept as '?') go to out if not NULL. */
static int read_string(Reader *r, char *out, size_t cap) {
    size_t n = 0;
    if (expect(r, '"')) return -1;
    while (r->p < r->end) {
        unsigned char c = (unsigned char)*r->p++;
        if (c == '"') {
            if (out) out[n < cap ? n : cap - 1] = '\0';
            return 0;
        }
        if (c < 0x20) return bad(r, "control character in string");
        if (c == '\\') {
            if (r->p >= r->end) break;
            char e = *r->p++;
            switch (e) {
            case '"': case '\\': case '/': c = (unsigned char)e; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u':
                for (int i = 0; i < 4; i++) {
                    if (r->p >= r->end || !isxdigit((unsigned char)*r->p)) return bad(r, "bad \\u escape");
                    r->p++;
                }
                c = '?';
                break;
            default: return bad(r, "bad escape");
            }
        }
        if (out && n + 1 < cap) out[n] = (char)c;
        n++;
    }
    return bad(r, "unterminated string");
}

/* A number. *is_int: it is an integer that fits in long long (then *value holds it). */
static int read_number(Reader *r, long long *value, int *is_int) {
    const char *start = r->p;
    if (r->p < r->end && *r->p == '-') r->p++;
    if (r->p >= r->end || !isdigit((unsigned char)*r->p)) return bad(r, "bad number");
    if (*r->p == '0') r->p++;
    else while (r->p < r->end && isdigit((unsigned char)*r->p)) r->p++;
    int integral = 1;
    if (r->p < r->end && *r->p == '.') {
        integral = 0;
        r->p++;
        if (r->p >= r->end || !isdigit((unsigned char)*r->p)) return bad(r, "bad number");
        while (r->p < r->end && isdigit((unsigned char)*r->p)) r->p++;
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        integral = 0;
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
        if (r->p >= r->end || !isdigit((unsigned char)*r->p)) return bad(r, "bad number");
        while (r->p < r->end && isdigit((unsigned char)*r->p)) r->p++;
    }
    *is_int = 0;
    if (integral && r->p - start < 24) {
        char text[32];
        memcpy(text, start, (size_t)(r->p - start));
        text[r->p - start] = '\0';
        errno = 0;
        long long v = strtoll(text, NULL, 10);
        if (errno == 0) {
            *value = v;
            *is_int = 1;
        }
    }
    return 0;
}

static int skip_value(Reader *r, int depth);

static int skip_container(Reader *r, char close, int depth) {
    skip_ws(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return 0;
    }
    for (;;) {
        if (close == '}') {
            if (read_string(r, NULL, 0) || expect(r, ':')) return -1;
        }
        if (skip_value(r, depth + 1)) return -1;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        return expect(r, close);
    }
}

static int read_literal(Reader *r, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) return bad(r, "bad literal");
    r->p += n;
    return 0;
}

static int skip_value(Reader *r, int depth) {
    if (depth > MAX_DEPTH) return bad(r, "nested too deep");
    skip_ws(r);
    if (r->p >= r->end) return bad(r, "expecting a value");
    long long v;
    int is_int;
    switch (*r->p) {
    case '{': r->p++; return skip_container(r, '}', depth);
    case '[': r->p++; return skip_container(r, ']', depth);
    case '"': return read_string(r, NULL, 0);
    case 't': return read_literal(r, "true");
    case 'f': return read_literal(r, "false");
    case 'n': return read_literal(r, "null");
    default: return read_number(r, &v, &is_int);
    }
}

static void free_prompts(Prompts *p) {
    for (int i = 0; i < p->n; i++) free(p->rows[i]);
    free(p->rows);
    free(p->lens);
    memset(p, 0, sizeof *p);
}

/* An array of integers into a growing buffer. */
static int read_ids(Reader *r, int **out, int *len) {
    int cap = 16, n = 0;
    int *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return bad(r, "out of memory");
    if (expect(r, '[')) goto fail;
    skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        *out = ids;
        *len = 0;
        return 0;
    }
    for (;;) {
        long long v;
        int is_int;
        skip_ws(r);
        if (read_number(r, &v, &is_int)) goto fail;
        if (!is_int || v < INT_MIN || v > INT_MAX) {
            snprintf(r->error, ERR_CAP, "ValueError: a prompt token is not an integer that fits");
            goto fail;
        }
        if (n == MAX_PROMPT) {
            snprintf(r->error, ERR_CAP, "ValueError: a prompt is longer than %d tokens", MAX_PROMPT);
            goto fail;
        }
        if (n == cap) {
            cap *= 2;
            int *grown = realloc(ids, (size_t)cap * sizeof *ids);
            if (!grown) {
                bad(r, "out of memory");
                goto fail;
            }
            ids = grown;
        }
        ids[n++] = (int)v;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (expect(r, ']')) goto fail;
        *out = ids;
        *len = n;
        return 0;
    }
fail:
    free(ids);
    return -1;
}

static int read_prompts(Reader *r, Prompts *p) {
    int cap = 0;
    if (expect(r, '[')) return -1;
    skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return 0;
    }
    for (;;) {
        if (p->n == MAX_ROWS) {
            snprintf(r->error, ERR_CAP, "ValueError: more than %d prompts", MAX_ROWS);
            return -1;
        }
        if (p->n == cap) {
            cap = cap ? 2 * cap : 16;
            int **rows = realloc(p->rows, (size_t)cap * sizeof *rows);
            if (!rows) return bad(r, "out of memory");
            p->rows = rows;
            int *lens = realloc(p->lens, (size_t)cap * sizeof *lens);
            if (!lens) return bad(r, "out of memory");
            p->lens = lens;
        }
        if (read_ids(r, &p->rows[p->n], &p->lens[p->n])) return -1;
        p->n++;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        return expect(r, ']');
    }
}

/* One request line into req; -1 with r->error set when it is not a JSON object we can read. */
static int read_request(Reader *r, Request *req) {
    if (expect(r, '{')) return -1;
    skip_ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
    } else {
        for (;;) {
            char key[32];
            if (read_string(r, key, sizeof key) || expect(r, ':')) return -1;
            skip_ws(r);
            if (strcmp(key, "op") == 0) {
                req->has_op = 1;
                req->op_is_string = r->p < r->end && *r->p == '"';
                if (req->op_is_string ? read_string(r, req->op, sizeof req->op) : skip_value(r, 1))
                    return -1;
            } else if (strcmp(key, "prompts") == 0) {
                free_prompts(&req->prompts);
                req->has_prompts = 1;
                if (read_prompts(r, &req->prompts)) return -1;
            } else if (strcmp(key, "steps") == 0) {
                long long v = 0;
                int is_int = 0;
                req->has_steps = 1;
                if (r->p < r->end && (*r->p == '-' || isdigit((unsigned char)*r->p))) {
                    if (read_number(r, &v, &is_int)) return -1;
                } else if (skip_value(r, 1)) {
                    return -1;
                }
                req->steps = v;
                req->steps_ok = is_int;
            } else if (strcmp(key, "margins") == 0) {
                const char *at = r->p;
                if (skip_value(r, 1)) return -1;
                /* true, a non-zero number, a non-empty string or container: asked for. */
                size_t n = (size_t)(r->p - at);
                req->margins = !((n == 5 && memcmp(at, "false", 5) == 0) ||
                                 (n == 4 && memcmp(at, "null", 4) == 0) ||
                                 (n == 1 && at[0] == '0') || (n == 2 && memcmp(at, "\"\"", 2) == 0) ||
                                 (n == 2 && (memcmp(at, "[]", 2) == 0 || memcmp(at, "{}", 2) == 0)));
            } else if (skip_value(r, 1)) {
                return -1;
            }
            skip_ws(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                continue;
            }
            if (expect(r, '}')) return -1;
            break;
        }
    }
    skip_ws(r);
    if (r->p != r->end) return bad(r, "extra data");
    return 0;
}

/* -- replies ------------------------------------------------------------------------------- */

static void write_escaped(FILE *out, const char *text) {
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(out, "\\%c", *c);
        else if (*c < 0x20 || *c >= 0x7f) fprintf(out, "\\u%04x", *c);
        else fputc(*c, out);
    }
    fputc('"', out);
}

static void reply_error(FILE *out, const char *message) {
    fputs("{\"ok\": false, \"error\": ", out);
    write_escaped(out, message);
    fputs("}\n", out);
}

int main(void) {
    /* A private copy of stdout for protocol lines; fd 1 now goes to stderr. */
    int proto_fd = dup(1);
    if (proto_fd < 0 || dup2(2, 1) < 0) return 1;
    FILE *proto = fdopen(proto_fd, "w");
    if (!proto) return 1;
    setvbuf(stdout, NULL, _IOLBF, 0);

    Engine *engine = engine_create();
    if (!engine) return 1;
    int batch = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    while ((got = getline(&line, &line_cap, stdin)) != -1) {
        Reader r = {line, line + got, line, ""};
        skip_ws(&r);
        if (r.p == r.end) continue;
        Request req;
        memset(&req, 0, sizeof req);
        char err[ERR_CAP] = "";
        if (read_request(&r, &req)) {
            reply_error(proto, r.error);
        } else if (!req.has_op || !req.op_is_string) {
            reply_error(proto, "unknown op: a request needs an \"op\" string");
        } else if (strcmp(req.op, "load") == 0) {
            const char *name = "engine";
            if (engine_load(engine, &name, err, sizeof err)) {
                reply_error(proto, err);
            } else {
                fputs("{\"ok\": true, \"info\": {\"engine\": ", proto);
                write_escaped(proto, name);
                fputs(", \"language\": \"c\"}}\n", proto);
            }
        } else if (strcmp(req.op, "prefill") == 0) {
            if (!req.has_prompts) {
                reply_error(proto, "KeyError: 'prompts'");
            } else {
                batch = req.prompts.n;
                if (engine_prefill(engine, batch, (const int *const *)req.prompts.rows,
                                   req.prompts.lens, err, sizeof err)) {
                    reply_error(proto, err);
                } else {
                    fputs("{\"ok\": true}\n", proto);
                }
            }
        } else if (strcmp(req.op, "decode") == 0) {
            if (!req.has_steps) {
                reply_error(proto, "KeyError: 'steps'");
            } else if (!req.steps_ok || req.steps < 0 || req.steps > MAX_STEPS ||
                       (long long)batch * req.steps > MAX_CELLS) {
                reply_error(proto, "ValueError: steps must be an integer in [0, 65536]");
            } else {
                int steps = (int)req.steps;
                size_t cells = (size_t)batch * (size_t)steps;
                int *tokens = malloc((cells ? cells : 1) * sizeof *tokens);
                double *margins = req.margins ? malloc((cells ? cells : 1) * sizeof *margins) : NULL;
                if (!tokens || (req.margins && !margins)) {
                    reply_error(proto, "MemoryError: no room for the decode's tokens");
                } else if (engine_decode(engine, batch, steps, tokens, margins, err, sizeof err)) {
                    reply_error(proto, err);
                } else {
                    fputs("{\"ok\": true, \"tokens\": [", proto);
                    for (int b = 0; b < batch; b++) {
                        fputs(b ? ", [" : "[", proto);
                        for (int s = 0; s < steps; s++)
                            fprintf(proto, s ? ", %d" : "%d", tokens[(size_t)b * steps + s]);
                        fputc(']', proto);
                    }
                    fputs("], \"margins\": ", proto);
                    if (!margins) {
                        fputs("null", proto);
                    } else {
                        fputc('[', proto);
                        for (int b = 0; b < batch; b++) {
                            fputs(b ? ", [" : "[", proto);
                            for (int s = 0; s < steps; s++) {
                                double m = margins[(size_t)b * steps + s];
                                if (!isfinite(m)) m = 0.0; /* JSON has no inf or nan */
                                fprintf(proto, s ? ", %.17g" : "%.17g", m);
                            }
                            fputc(']', proto);
                        }
                        fputc(']', proto);
                    }
                    fputs("}\n", proto);
                }
                free(tokens);
                free(margins);
            }
        } else if (strcmp(req.op, "reset") == 0) {
            engine_reset(engine);
            batch = 0;
            fputs("{\"ok\": true}\n", proto);
        } else {
            char message[96];
            snprintf(message, sizeof message, "unknown op '%s'", req.op);
            reply_error(proto, message);
        }
        free_prompts(&req.prompts);
        fflush(proto);
    }
    free(line);
    return 0;
}
