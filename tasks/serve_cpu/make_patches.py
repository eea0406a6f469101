# ruff: noqa: E501  (the edits are source text, kept line for line)
"""Regenerate serve_cpu's patches: ``reference/solution.patch``, ``moves/`` (the scripted agents'
library: ``moves.yaml``, ``moves.json`` and one patch per move), ``mutants/`` and
``template/harness/public_expected.json``.

Run ``python tasks/serve_cpu/make_patches.py`` from the project (numpy for the expected tokens)
after any change to the template. This file is the data (moves, sweeps, mutants); the engine
that turns edits into patches, and its rules, is ``tasks/patchkit.py``. A mutant's ``moves``
are library moves applied first (their closure), then its edits.

The reference solution is the template with every ``good`` move applied, in library order.
Move ``kind`` is the author's intent (good | wrong | rule | dead); the judge decides verdicts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Run as a file (``python tasks/<task>/make_patches.py``): the project holding it comes first on
# the path, so its own patch kit is the one used (a copy elsewhere needs it on PYTHONPATH).
_PROJECT = Path(__file__).resolve().parents[2]
if not __package__ and (_PROJECT / "tasks" / "patchkit.py").is_file():
    sys.path.insert(0, str(_PROJECT))

from tasks.patchkit import Edit, Library, Move, Mutant, Sweep  # noqa: E402

TASK = Path(__file__).resolve().parent
TEMPLATE = TASK / "template"
MODEL = "engine/model.py"
SCHED = "engine/scheduler.py"


# -- model_rows (kernels): one token for every row of a batch, each product over all rows -------

_FORWARD_END = """        cache.length = pos + 1
        return x @ w.head if logits else None
"""
_FORWARD_ROWS = """        cache.length = pos + 1
        return x @ w.head if logits else None

    def forward_rows(self, caches: list[Cache], tokens: list[int]) -> np.ndarray:
        \"\"\"One token for each row at the row's own next position; logits (rows, VOCAB).

        Every product reads its weights once for all rows (exact integers: the same bits as
        ``forward`` row by row); attention stays per row, over the row's own cache.
        \"\"\"
        if len(caches) == 1:  # a lone request: the one-row path, no batch bookkeeping
            return self.forward(caches[0], tokens[0])[None, :]
        w, rows = self.w, len(caches)
        positions = [cache.length for cache in caches]
        x = clip(w.embed[tokens] + w.pos[positions])
        for index, layer in enumerate(w.layers):
            q = requant(x @ layer.wq).reshape(rows, HEADS, HEAD_DIM)
            k = requant(x @ layer.wk).reshape(rows, HEADS, HEAD_DIM)
            v = requant(x @ layer.wv).reshape(rows, HEADS, HEAD_DIM)
            for r, (cache, pos) in enumerate(zip(caches, positions, strict=True)):
                cache.keys[index][pos] = k[r]
                cache.values[index][pos] = v[r]
            att = np.empty_like(x)
            for r, (cache, pos) in enumerate(zip(caches, positions, strict=True)):
                att[r] = attend(q[r], cache.keys[index][: pos + 1], cache.values[index][: pos + 1])
            x = clip(x + requant(att @ layer.wo))
            h = np.maximum(requant(x @ layer.w1), 0.0)
            x = clip(x + requant(h @ layer.w2))
        for cache, pos in zip(caches, positions, strict=True):
            cache.length = pos + 1
        return x @ w.head
"""
MODEL_ROWS: list[Edit] = [(MODEL, _FORWARD_END, _FORWARD_ROWS)]

# -- continuous_batching (scheduler): requests join and leave a running batch at every step ----

_SCHED_DOC_OLD = """\"\"\"The request scheduler (baseline: one request at a time, first come first served).

``harness/server.py`` calls ``submit`` from each connection's thread; one worker thread runs
the model. This baseline finishes a request before it starts the next, so 16 concurrent
clients get 1/16 of the throughput each: the model never sees more than one row.
\"\"\""""
_SCHED_DOC_NEW = """\"\"\"The request scheduler: continuous batching.

``harness/server.py`` calls ``submit`` from each connection's thread; one worker thread runs
the model. At every step the worker admits the requests that arrived (prefill), emits one
token for every running request, drops the finished ones and runs the rest as one batch
(``Model.forward_rows``): a request joins or leaves the batch at any step.
\"\"\""""
_IMPORTS_OLD = """from harness.api import Request

from .model import Model, greedy, top_logprobs
"""
_IMPORTS_NEW = """from harness.api import Request

from .model import Cache, Model, greedy, top_logprobs

MAX_ROWS = 64  # the most requests in one batch; the rest wait for a row to free


class _Row:
    \"\"\"A running request: its cache, the logits for its next token, tokens emitted so far.\"\"\"

    __slots__ = ("request", "cache", "logits", "produced")

    def __init__(self, request: Request, cache: Cache, logits) -> None:
        self.request, self.cache, self.logits, self.produced = request, cache, logits, 0
"""
_CLASS_DOC_OLD = '''    """Runs every request on one worker thread, one after another."""'''
_CLASS_DOC_NEW = (
    '''    """Runs every request on one worker thread, all running requests in one batch."""'''
)
_STATS_OLD = """            "scheduler": "serial","""
_STATS_NEW = """            "scheduler": "continuous","""
_RUN_OLD = """    def _run(self) -> None:
        while True:
            request = self.waiting.get()
            try:
                self._generate(request)
            except Exception as exc:  # one bad request must not stop the server
                request.fail(f"{type(exc).__name__}: {exc}")
            self.served += 1
"""
_RUN_NEW = """    def _run(self) -> None:
        rows: list[_Row] = []
        while True:
            if not rows:  # idle: sleep until a request comes
                self._admit(rows, self.waiting.get())
            while len(rows) < MAX_ROWS:
                try:
                    self._admit(rows, self.waiting.get_nowait())
                except queue.Empty:
                    break
            rows, tokens = self._emit(rows)
            if not rows:
                continue
            try:
                logits = self.model.forward_rows([row.cache for row in rows], tokens)
            except Exception as exc:  # fail this batch, keep serving
                for row in rows:
                    row.request.fail(f"{type(exc).__name__}: {exc}")
                rows = []
                continue
            self.batch_sizes[len(rows)] += 1
            for row, row_logits in zip(rows, logits, strict=True):
                row.logits = row_logits

    def _admit(self, rows: list[_Row], request: Request) -> None:
        \"\"\"Prefill a new request and add it to the batch.\"\"\"
        try:
            cache = self.model.new_cache(len(request.prompt) + request.max_tokens)
            rows.append(_Row(request, cache, self.model.prefill(cache, request.prompt)))
        except Exception as exc:  # one bad request must not stop the server
            request.fail(f"{type(exc).__name__}: {exc}")
            self.served += 1

    def _emit(self, rows: list[_Row]) -> tuple[list[_Row], list[int]]:
        \"\"\"Emit each row's next token; the rows still running and the tokens they run next.\"\"\"
        running, tokens = [], []
        for row in rows:
            request = row.request
            if request.cancelled:
                self.served += 1
                continue
            token = greedy(row.logits)
            lps = [top_logprobs(row.logits, request.logprobs)] if request.logprobs else None
            request.emit([token], lps)
            row.produced += 1
            if row.produced == request.max_tokens:
                request.finish()
                self.served += 1
            else:
                running.append(row)
                tokens.append(token)
        return running, tokens
"""
# The baseline's one-request path is gone: the batch does it.
_GENERATE_OLD = """
    def _generate(self, request: Request) -> None:
        model = self.model
        cache = model.new_cache(len(request.prompt) + request.max_tokens)
        logits = model.prefill(cache, request.prompt)
        for step in range(request.max_tokens):
            if request.cancelled:
                return
            token = greedy(logits)
            lps = [top_logprobs(logits, request.logprobs)] if request.logprobs else None
            request.emit([token], lps)
            self.batch_sizes[1] += 1
            if step + 1 < request.max_tokens:
                logits = model.forward(cache, token)
        request.finish()
"""
CONTINUOUS: list[Edit] = [
    (SCHED, _SCHED_DOC_OLD, _SCHED_DOC_NEW),
    (SCHED, _IMPORTS_OLD, _IMPORTS_NEW),
    (SCHED, _CLASS_DOC_OLD, _CLASS_DOC_NEW),
    (SCHED, _STATS_OLD, _STATS_NEW),
    (SCHED, _RUN_OLD, _RUN_NEW),
    (SCHED, _GENERATE_OLD, ""),
]

# -- prefill_matrix (prefill): a prompt's tokens in one product per matrix, causal attention ---

_PREFILL_OLD = """    def prefill(self, cache: Cache, prompt: list[int]) -> np.ndarray:
        \"\"\"Run the prompt, one token at a time; the logits after its last token.\"\"\"
        for token in prompt[:-1]:
            self.forward(cache, token, logits=False)
        return self.forward(cache, prompt[-1])
"""
_PREFILL_NEW = """    def prefill(self, cache: Cache, prompt: list[int]) -> np.ndarray:
        \"\"\"Run the whole prompt at once (each product over all its positions, causal
        attention over the cache); the logits after its last token.\"\"\"
        w, start, n = self.w, cache.length, len(prompt)
        end = start + n
        positions = np.arange(start, end)
        x = clip(w.embed[prompt] + w.pos[positions])
        visible = np.arange(end)[None, :] <= positions[:, None]  # (n, end): no peeking ahead
        for index, layer in enumerate(w.layers):
            q = requant(x @ layer.wq).reshape(n, HEADS, HEAD_DIM)
            cache.keys[index][start:end] = requant(x @ layer.wk).reshape(n, HEADS, HEAD_DIM)
            cache.values[index][start:end] = requant(x @ layer.wv).reshape(n, HEADS, HEAD_DIM)
            keys, values = cache.keys[index][:end], cache.values[index][:end]
            scores = np.where(visible, np.einsum("phd,thd->hpt", q, keys), -np.inf)
            weights = np.maximum(scores - scores.max(axis=2, keepdims=True) + WINDOW, 0.0)
            total = np.einsum("hpt,thd->phd", weights, values)
            att = np.floor(total / weights.sum(axis=2).T[:, :, None]).reshape(n, -1)
            x = clip(x + requant(att @ layer.wo))
            h = np.maximum(requant(x @ layer.w1), 0.0)
            x = clip(x + requant(h @ layer.w2))
        cache.length = end
        return x[-1] @ w.head
"""
PREFILL_MATRIX: list[Edit] = [(MODEL, _PREFILL_OLD, _PREFILL_NEW)]

# -- float32 (kernels): weights, activations and caches in float32 (still exact) -----------------

_INIT_OLD = """    def __init__(self) -> None:
        self.w: Weights = load_weights()
"""
_INIT_NEW = """    def __init__(self) -> None:
        # float32 holds every value exactly (each partial sum stays below 2**24) and halves
        # the bytes each product reads.
        w = load_weights()
        f32 = np.float32
        self.w: Weights = Weights(
            embed=w.embed.astype(f32),
            pos=w.pos.astype(f32),
            layers=tuple(
                Layer(*(m.astype(f32) for m in (layer.wq, layer.wk, layer.wv, layer.wo, layer.w1, layer.w2)))
                for layer in w.layers
            ),
            head=w.head.astype(f32),
        )
"""
_CACHE_OLD = """        self.keys = [np.zeros((capacity, HEADS, HEAD_DIM)) for _ in range(LAYERS)]
        self.values = [np.zeros((capacity, HEADS, HEAD_DIM)) for _ in range(LAYERS)]
"""
_CACHE_NEW = """        self.keys = [np.zeros((capacity, HEADS, HEAD_DIM), np.float32) for _ in range(LAYERS)]
        self.values = [np.zeros((capacity, HEADS, HEAD_DIM), np.float32) for _ in range(LAYERS)]
"""
_WIMPORT_OLD = """    WINDOW,
    Weights,
    load_weights,
)
"""
_WIMPORT_NEW = """    WINDOW,
    Layer,
    Weights,
    load_weights,
)
"""
_DOWN_OLD = "_DOWN = 2.0**-SHIFT\n"
_DOWN_NEW = "_DOWN = np.float32(2.0**-SHIFT)  # a float64 scalar would promote float32 arrays\n"
_CLIPF_OLD = """    return np.clip(np.floor(y * _DOWN), -LEVEL, LEVEL)
"""
_CLIPF_NEW = """    return np.clip(np.floor(y * _DOWN), -LEVEL, LEVEL).astype(y.dtype, copy=False)
"""
_TOPLP_OLD = "    scaled = logits / LOGIT_SCALE\n"
_TOPLP_NEW = (
    "    scaled = logits.astype(np.float64) / LOGIT_SCALE  # the baseline's float64 logprobs\n"
)
FLOAT32: list[Edit] = [
    (MODEL, _WIMPORT_OLD, _WIMPORT_NEW),
    (MODEL, _DOWN_OLD, _DOWN_NEW),
    (MODEL, _CLIPF_OLD, _CLIPF_NEW),
    (MODEL, _CACHE_OLD, _CACHE_NEW),
    (MODEL, _INIT_OLD, _INIT_NEW),
    (MODEL, _TOPLP_OLD, _TOPLP_NEW),
]

# -- attn_rows_padded (attention): one attention for all rows, keys padded and masked -----------

_ATT_LOOP_OLD = """            att = np.empty_like(x)
            for r, (cache, pos) in enumerate(zip(caches, positions, strict=True)):
                att[r] = attend(q[r], cache.keys[index][: pos + 1], cache.values[index][: pos + 1])
"""
_ATT_LOOP_NEW = """            att = attend_rows(q, [c.keys[index] for c in caches], [c.values[index] for c in caches], positions)
"""
_ATTEND_OLD = """def greedy(logits: np.ndarray) -> int:"""
_ATTEND_NEW = """def attend_rows(q: np.ndarray, keys: list, values: list, positions: list[int]) -> np.ndarray:
    \"\"\"Every row's attention at once: caches padded to the longest, padding weighted 0.

    q (rows, HEADS, HEAD_DIM); returns (rows, HEADS * HEAD_DIM), the same integers as
    ``attend`` row by row (a padded position adds exact zeros).
    \"\"\"
    rows, span = len(keys), max(positions) + 1
    k = np.zeros((rows, span, HEADS, HEAD_DIM), q.dtype)
    v = np.zeros_like(k)
    for r, pos in enumerate(positions):
        k[r, : pos + 1] = keys[r][: pos + 1]
        v[r, : pos + 1] = values[r][: pos + 1]
    visible = np.arange(span)[None, :] <= np.asarray(positions)[:, None]  # (rows, span)
    scores = np.where(visible[:, None, :], np.einsum("rhd,rthd->rht", q, k), -np.inf)
    weights = np.maximum(scores - scores.max(axis=2, keepdims=True) + WINDOW, 0.0)
    total = np.einsum("rht,rthd->rhd", weights, v)
    return np.floor(total / weights.sum(axis=2, keepdims=True)).reshape(rows, -1)


def greedy(logits: np.ndarray) -> int:"""
ATTN_ROWS: list[Edit] = [(MODEL, _ATT_LOOP_OLD, _ATT_LOOP_NEW), (MODEL, _ATTEND_OLD, _ATTEND_NEW)]

# -- wrong moves --------------------------------------------------------------------------------

# Removing a finished row by moving the last row into its place, O(1), while the tokens list
# keeps its order: the moved request runs (and gets) the finished one's token.
SWAP_ON_LEAVE: list[Edit] = [
    (
        SCHED,
        """        running, tokens = [], []
        for row in rows:
            request = row.request
            if request.cancelled:
                self.served += 1
                continue
            token = greedy(row.logits)
            lps = [top_logprobs(row.logits, request.logprobs)] if request.logprobs else None
            request.emit([token], lps)
            row.produced += 1
            if row.produced == request.max_tokens:
                request.finish()
                self.served += 1
            else:
                running.append(row)
                tokens.append(token)
        return running, tokens
""",
        """        tokens = [greedy(row.logits) for row in rows]
        i = 0
        while i < len(rows):
            row = rows[i]
            request = row.request
            lps = [top_logprobs(row.logits, request.logprobs)] if request.logprobs else None
            request.emit([tokens[i]], lps)
            row.produced += 1
            if row.produced == request.max_tokens or request.cancelled:
                request.finish()
                self.served += 1
                rows[i] = rows[-1]  # O(1) removal: the last row takes this place
                rows.pop()
                tokens.pop(i)
                continue
            i += 1
        return rows, tokens
""",
    )
]

# Pads every batch to 16 rows so the products always see one shape: B=1 does 16 rows of work.
PAD_TO_16: list[Edit] = [
    (
        MODEL,
        """        if len(caches) == 1:  # a lone request: the one-row path, no batch bookkeeping
            return self.forward(caches[0], tokens[0])[None, :]
        w, rows = self.w, len(caches)
        positions = [cache.length for cache in caches]
        x = clip(w.embed[tokens] + w.pos[positions])
""",
        """        w, rows = self.w, len(caches)
        positions = [cache.length for cache in caches]
        x = clip(w.embed[tokens] + w.pos[positions])
        if rows < 16:  # one shape for every product: pad with copies of row 0
            pad = np.repeat(x[:1], 16 - rows, axis=0)
            for layer in w.layers:
                for m in (layer.wq, layer.wk, layer.wv, layer.wo):
                    pad @ m
                np.maximum(requant(pad @ layer.w1), 0.0) @ layer.w2
            pad @ w.head
""",
    )
]

# Waits 10 ms for companions before every step while the batch is small: more rows per step under
# load, a sleep per token for a lone request.
BATCH_WINDOW: list[Edit] = [
    (
        SCHED,
        """            rows, tokens = self._emit(rows)
            if not rows:
                continue
""",
        """            rows, tokens = self._emit(rows)
            if not rows:
                continue
            if len(rows) < 4:  # a small batch: give other requests 10 ms to join
                time.sleep(0.010)
""",
    ),
    (SCHED, "import threading\n", "import threading\nimport time\n"),
]

# A pool of caches reused across requests (saves allocations) that never resets their length:
# every request after the first starts at a stale position with a stale cache.
KV_POOL: list[Edit] = [
    (
        MODEL,
        """    def __init__(self) -> None:
        self.w: Weights = load_weights()
""",
        """    def __init__(self) -> None:
        self.w: Weights = load_weights()
        self.pool: list[Cache] = []

    def release(self, cache: Cache) -> None:
        \"\"\"Give a finished request's cache back for reuse.\"\"\"
        self.pool.append(cache)
""",
    ),
    (
        MODEL,
        """        \"\"\"An empty cache for a request of `capacity` positions (prompt + new tokens).\"\"\"
        return Cache(capacity)
""",
        """        \"\"\"An empty cache for a request of `capacity` positions (prompt + new tokens).\"\"\"
        for i, cache in enumerate(self.pool):
            if cache.keys[0].shape[0] >= capacity:
                return self.pool.pop(i)
        return Cache(max(capacity, 256))
""",
    ),
    (
        SCHED,
        """            if step + 1 < request.max_tokens:
                logits = model.forward(cache, token)
        request.finish()
""",
        """            if step + 1 < request.max_tokens:
                logits = model.forward(cache, token)
        request.finish()
        model.release(cache)
""",
    ),
]

# -- rule moves ----------------------------------------------------------------------------------

COALESCE_CHUNKS: list[Edit] = [
    (
        "harness/server.py",
        """            event = request.events.get()
            if event is None:
                break
            if isinstance(event, Failure):
                error = {""",
        """            event = request.events.get()
            while event is not None and not isinstance(event, Failure) and not request.events.empty():
                more = request.events.get()  # fewer, larger chunks: one write for what is ready
                if more is None or isinstance(more, Failure):
                    request.events.put(more)
                    break
                event = (event[0] + more[0], None if event[1] is None else event[1] + more[1])
            if event is None:
                break
            if isinstance(event, Failure):
                error = {""",
    )
]
CHECK_FEWER: list[Edit] = [("harness/check.py", "MAX_TOKENS = 48\n", "MAX_TOKENS = 12\n")]
_PROFILE_PY = '''"""Profile 64 batched steps of the model: ``python profile.py``."""

import cProfile
import pstats

from engine.model import Model

model = Model()
caches = [model.new_cache(96) for _ in range(16)]
for cache in caches:
    model.prefill(cache, list(range(1, 17)))
cProfile.run("[model.forward_rows(caches, [1] * 16) for _ in range(64)]", "/tmp/serve.prof")
pstats.Stats("/tmp/serve.prof").sort_stats("cumulative").print_stats(15)
'''

# -- dead moves ------------------------------------------------------------------------------------

SIMPLE_QUEUE: list[Edit] = [
    (
        SCHED,
        "        self.waiting: queue.Queue[Request] = queue.Queue()\n",
        "        self.waiting: queue.SimpleQueue[Request] = queue.SimpleQueue()\n",
    )
]
ARGPARTITION: list[Edit] = [
    (
        MODEL,
        """    order = np.lexsort((np.arange(lps.size), -lps))[:k]
""",
        """    order = np.argsort(-lps, kind="stable")[:k]  # stable: the lowest id first on ties
""",
    )
]

MOVES: list[Move] = [
    Move(
        "model_rows",
        "batching",
        "good",
        "Model.forward_rows: one token for every row of a batch, each product reading its weights once for all rows (exact integers: the same tokens); nothing calls it yet",
        MODEL_ROWS,
    ),
    Move(
        "continuous_batching",
        "batching",
        "good",
        "the worker admits waiting requests at every step and runs all running ones as one batch; finished requests leave at once",
        CONTINUOUS,
        requires=("model_rows",),
    ),
    Move(
        "swap_on_leave",
        "batching",
        "wrong",
        "finished rows leave by moving the last row into their place, while each row's next token is read by position: requests get each other's tokens",
        SWAP_ON_LEAVE,
        requires=("continuous_batching",),
        reason="mismatch",
    ),
    Move(
        "batch_window",
        "batching",
        "wrong",
        "while the batch holds fewer than 4 requests, wait 10 ms per step for others to join: a lone request sleeps at every token",
        BATCH_WINDOW,
        requires=("continuous_batching",),
        reason="b1_regression",
    ),
    Move(
        "prefill_matrix",
        "prefill",
        "good",
        "prefill runs the whole prompt at once: every product over all its positions, causal attention with a mask",
        PREFILL_MATRIX,
    ),
    Move(
        "kv_pool",
        "prefill",
        "wrong",
        "reuses finished requests' KV caches from a pool to save allocations, but never resets their length: later requests start at a stale position",
        KV_POOL,
        reason="mismatch",
    ),
    Move(
        "float32_weights",
        "kernels",
        "good",
        "weights, activations and caches in float32: every value and partial sum is still an exact integer, and each product reads half the bytes",
        FLOAT32,
    ),
    Move(
        "pad_batch_to_16",
        "kernels",
        "wrong",
        "pads every batch to 16 rows so the products see one shape: a single request does 16 rows of work",
        PAD_TO_16,
        requires=("continuous_batching",),
        reason="b1_regression",
    ),
    Move(
        "attn_rows_padded",
        "attention",
        "good",
        "attention for all rows of a step in one einsum: caches padded to the longest row, padding masked to weight 0",
        ATTN_ROWS,
        requires=("model_rows",),
    ),
    Move(
        "logprobs_argsort",
        "attention",
        "dead",
        "top-k logprobs by one stable argsort instead of a lexsort (only the untimed margin requests use them)",
        ARGPARTITION,
    ),
    Move(
        "simple_queue",
        "batching",
        "dead",
        "queue.SimpleQueue for the waiting requests (a lighter queue; not on any per-token path)",
        SIMPLE_QUEUE,
    ),
    Move(
        "server_coalesce_chunks",
        "batching",
        "rule",
        "harness/server.py sends the tokens already waiting as one chunk (frozen zone)",
        COALESCE_CHUNKS,
        reason="frozen_zone",
    ),
    Move(
        "check_fewer_tokens",
        "prefill",
        "rule",
        "shortens harness/check.py's completions for quicker local runs (frozen zone)",
        CHECK_FEWER,
        reason="frozen_zone",
    ),
    Move(
        "profile_script",
        "kernels",
        "rule",
        "adds a top-level profile.py helper, which shadows the standard library's profile",
        [("profile.py", "", _PROFILE_PY)],
        requires=("model_rows",),
        reason="shadowing",
    ),
]

SWEEPS: list[Sweep] = [
    Sweep(
        "max_rows",
        SCHED,
        "MAX_ROWS = 64",
        "MAX_ROWS = {value}",
        (4, 8, 16, 32),
        "the most requests one batch runs (the rest wait for a row)",
        after=("continuous_batching",),
    ),
]

# The critic's quick local check: the frozen harness/check.py (a server on a free port).
CHECK = ["{python}", "-I", "-B", "harness/check.py"]

_TIME_PY = '''"""A clock that runs slow, shadowing the standard library's `time`."""

_now = 0.0


def perf_counter() -> float:
    """Advance one microsecond per call, whatever really happened."""
    global _now
    _now += 1e-6
    return _now


monotonic = perf_counter
time = perf_counter


def sleep(seconds: float) -> None:
    """Pretend to sleep."""
'''

# Every row of a batch attends over the padded span: shorter rows see the padding's zeros.
_UNMASKED = [
    (
        MODEL,
        """    scores = np.where(visible[:, None, :], np.einsum("rhd,rthd->rht", q, k), -np.inf)
""",
        """    scores = np.einsum("rhd,rthd->rht", q, k)  # padding is zeros: harmless (it is not)
""",
    )
]

MUTANTS: list[Mutant] = [
    Mutant("swap_on_leave", SWAP_ON_LEAVE, on_reference=True),
    Mutant("attention_mixes_rows", _UNMASKED, on_reference=True),
    Mutant("kv_pool_stale", KV_POOL),
    Mutant("batch_window", BATCH_WINDOW, on_reference=True),
    Mutant(
        "prefill_off_by_one",
        [
            (
                MODEL,
                "        positions = np.arange(start, end)\n",
                "        positions = np.arange(start + 1, end + 1)  # 1-based\n",
            )
        ],
        on_reference=True,
    ),
    Mutant(
        "weights_edit",
        [("harness/weights.py", "WEIGHT_SEED = 20_251_201\n", "WEIGHT_SEED = 20_251_202\n")],
    ),
    Mutant("shadow_stdlib", [("time.py", "", _TIME_PY)]),
    Mutant(
        "pth_hook",
        [
            (
                "engine/speed.pth",
                "",
                "import os; os.environ.setdefault('OPENBLAS_NUM_THREADS', '64')\n",
            )
        ],
    ),
]


LIBRARY = Library(
    TASK,
    MOVES,
    SWEEPS,
    CHECK,
    header=(
        "# The scripted agents' move library (generated by `python tasks/serve_cpu/make_patches.py`;\n"
        "# do not edit by hand). Each patch is a `git diff` against template/ with the moves in\n"
        "# `requires` applied. `kind` is the author's intent (good | wrong | rule | dead).\n"
    ),
)


def write_public_expected() -> None:
    """``harness/public_expected.json``: the baseline model's tokens for check.py's prompts."""
    sys.path.insert(0, str(TEMPLATE))
    try:
        from engine.model import Model, greedy  # the template's, run in this process
        from harness import check
    finally:
        sys.path.remove(str(TEMPLATE))
    model = Model()
    prompts = check.public_prompts(check.PUBLIC_SEED, check.REQUESTS, check.PROMPT_LEN, check.VOCAB)
    tokens = []
    for prompt in prompts:
        cache = model.new_cache(len(prompt) + check.MAX_TOKENS)
        logits, row = model.prefill(cache, prompt), []
        for _ in range(check.MAX_TOKENS):
            row.append(greedy(logits))
            logits = model.forward(cache, row[-1])
        tokens.append(row)
    data = {"seed": check.PUBLIC_SEED, "max_tokens": check.MAX_TOKENS, "tokens": tokens}
    (TEMPLATE / "harness" / "public_expected.json").write_text(json.dumps(data) + "\n")


def main() -> int:
    """Write the expected tokens, the moves, the reference solution and the mutants."""
    write_public_expected()
    LIBRARY.write_moves()
    LIBRARY.write_reference()
    LIBRARY.write_mutants(MUTANTS, prune=True)
    goods = LIBRARY.goods()
    print(f"{len(MOVES)} moves, {len(SWEEPS)} sweeps, {len(MUTANTS)} mutants, reference = {goods}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
