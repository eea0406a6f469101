"""The server kind's generated mutants: derived from the task itself, no hand-written patch.

Like the decode kind's (``judge.kinds.decode.mutants``), none edits the server's source: the
frozen-zone ones change the tree; the others add an HTTP proxy (``wrap.py``, with the
load generator's own client and h11 beside it) in a non-frozen folder, served as
``{python} -I -B <folder>/wrap.py``: it starts the task's real ``serve`` on the next port and
cheats in front of it. The serve override is honoured only for
the judge's own mutant repository (``judge.mutant.candidate_serve``).

Expectations, and why:

- ``gen_swap``: two concurrent requests trade prompts, so each gets the other's tokens:
  WRONG ``mismatch`` (every correctness case with more than one request sees it).
- ``gen_truncate``: the stream is cut after half the tokens, without ``[DONE]``: WRONG
  ``protocol`` (a stream must end with ``[DONE]``).
- ``gen_ignore_max_tokens``: asks the real server for 4 tokens more than requested: WRONG
  ``mismatch`` (more ids than ``max_tokens``; extra output is never free throughput).
- ``gen_cache``: a second identical request is replayed from memory. The judge never sends
  a prompt twice to a candidate (stored sets once each, timed prompts drawn per run), so the
  cache never hits: PASS with no gain (x <= 2).
- ``gen_fake_usage``: a final ``usage`` chunk claiming 999999 tokens: the judge counts ids, so
  PASS with no gain.
- ``gen_serial``: one request at a time: PASS, no gain over a serial baseline, single stream
  unchanged (against a batching baseline it would lose throughput, never correctness).
- ``gen_slow_first``: the first request waits 1 s: it is a correctness request, never timed:
  PASS.
- ``gen_b1_slow_2x``: a request alone in flight streams twice as slowly: WRONG
  ``b1_regression`` (UNRESOLVED where the machine's resolution is coarser).
- ``gen_network``: a UDP connect() to TEST-NET-1 at start; exits when it fails: WRONG ``crash``
  (it never answers readiness).
- ``gen_hang``: every completion hangs: WRONG ``timeout``.
- ``gen_split_chunks`` (``token_ids: text`` only): the same text, one chunk per character. A
  count by the candidate's chunks would multiply its tok/s; the judge credits a timed run with
  its paired baseline run's count once the texts are equal: PASS with no gain.
- ``gen_slow_headers``: the response's head trickled a byte every 50 ms, never ending (slow
  loris): every read gets a byte in time; one deadline per request ends it: WRONG ``timeout``.
- ``gen_slow_body``: the head at once, then an SSE comment trickled a byte every 50 ms,
  never ending: WRONG ``timeout`` (the same deadline).
- ``gen_1xx_flood``: ``100 Continue`` responses without end: WRONG ``protocol`` (the client
  takes at most 16 before the final response).
- ``gen_status_leak``: an HTTP status (5xx) and reason phrase computed from the hidden prompt:
  WRONG ``protocol``, and neither may reach the verdict's detail (``detail_excludes``): the
  server chose that number after the hidden prompt arrived.
- ``gen_odd_chunks``: honest, its stream re-framed as odd-sized chunks (events straddle them),
  chunk extensions, a trailer, a ``100`` and a ``103`` before the ``200``: all RFC 9112, all
  to be decoded: PASS with no gain.
- ``gen_frozen_edit`` / ``gen_frozen_added``: REJECT ``frozen_zone``.

The proxy reads the real server with the load generator's own client (``server_load.py`` and
h11, copied beside it), so a relayed request ends with its upstream message, whatever the
upstream's framing or keep-alive.

With ``server.correctness: drift`` two more (and WRONG ``quality`` is required):

- ``gen_worse_logprobs``: the same tokens, every teacher-forced log-likelihood one nat worse:
  WRONG ``quality``.
- ``gen_teacher_forced_only``: the scoring requests pass through untouched (perfect
  likelihoods) while every generated id is off by one: WRONG ``mismatch``, the
  loose-verification exploit a teacher-forced check alone would PASS.
"""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from judge.kinds.server.sidecar import LOADGEN, h11_package
from judge.mutant import (
    RANDOM_SLOW_FACTOR,
    Mutant,
    frozen_zone_mutants,
    random_slow_margin,
    wrap_dir,
)

WRAPPER = Path(__file__).with_name("wrap.py")
CHECK_REASONS = ("mismatch", "protocol", "timeout", "crash", "b1_regression")
# gen_status_leak's statuses (500 + its hidden token % 100): none may reach the detail.
LEAK_STATUSES = [str(500 + i) for i in range(100)]


def required_reasons(task: DictConfig) -> list[str]:
    """The verdicts ``verdict (reason)`` a catalogue of ``task`` must hold at least once."""
    needed = [f"WRONG ({r})" for r in CHECK_REASONS]
    if _drift(task):
        needed.append("WRONG (quality)")
    if list(task.frozen):
        needed.append("REJECT (frozen_zone)")
    return needed


def _drift(task: DictConfig) -> bool:
    return str(OmegaConf.select(task, "server.correctness", default="tokens")) == "drift"


def _add_wrapper(tree: Path, folder: str, settings: dict[str, object]) -> None:
    target = tree / folder
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(WRAPPER, target / "wrap.py")
    # The judge's own HTTP client and its parser: sources only (no bytecode in a tree).
    shutil.copyfile(LOADGEN, target / "server_load.py")
    shutil.copytree(
        h11_package(),
        target / "lib" / "h11",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"),
    )
    (target / "mutant.json").write_text(json.dumps(settings, indent=1) + "\n")


def generated(cfg: DictConfig) -> list[Mutant]:
    """The server kind's generic mutants of ``cfg.task``, each with its expected verdict."""
    from tasks.schema import task_root

    task = cfg.task
    template = task_root(task) / task.template
    folder = wrap_dir(task)
    serve = ["{python}", "-I", "-B", f"{folder}/wrap.py"]
    b1_margin = round(1.0 - float(task.spec.b1_max_regression), 4)

    def wrapped(
        name: str,
        mode: str,
        expect: str,
        reason: str | None,
        why: str,
        max_x: float | None = None,
        b1_margin: float | None = None,
        detail_excludes: list[str] | None = None,
        **extra: object,
    ) -> Mutant:
        settings = {"mode": mode, "serve": list(task.serve), **extra}
        return Mutant(
            name=name,
            patch=None,
            expect=expect,
            reason=reason,
            # The wrapper relays every byte, so alone in flight it is a little slower than the
            # server it wraps: convicting that of a B=1 regression is a finding, not an error.
            also_accept=("WRONG (b1_regression)",) if expect == "PASS" else (),
            max_x_baseline=max_x,
            b1_margin=b1_margin,
            detail_excludes=list(detail_excludes or []),
            why=why,
            tree=partial(_add_wrapper, folder=folder, settings=settings),
            serve=serve,
            source="generated",
        )

    mutants = [
        Mutant(
            name="baseline",
            patch=None,
            expect="PASS",
            max_x_baseline=2.0,
            why="the template as it is: valid, and about as fast as itself",
            source="generated",
        ),
        wrapped("gen_swap", "swap", "WRONG", "mismatch", "concurrent requests trade prompts"),
        wrapped(
            "gen_truncate",
            "truncate",
            "WRONG",
            "protocol",
            "the stream is cut after half the tokens, without [DONE]",
        ),
        wrapped(
            "gen_ignore_max_tokens",
            "ignore_max_tokens",
            "WRONG",
            "mismatch",
            "generates 4 tokens more than max_tokens",
        ),
        wrapped(
            "gen_cache",
            "cache",
            "PASS",
            None,
            "replays a repeated prompt from memory: the judge never repeats one, no gain",
            max_x=2.0,
        ),
        wrapped(
            "gen_fake_usage",
            "fake_usage",
            "PASS",
            None,
            "a final usage chunk claims 999999 tokens: the judge counts ids, no gain",
            max_x=2.0,
        ),
        wrapped(
            "gen_serial",
            "serial",
            "PASS",
            None,
            "one request at a time: correct, no gain",
            max_x=2.0,
        ),
        wrapped(
            "gen_slow_first",
            "slow_first",
            "PASS",
            None,
            "the first request waits 1 s: a correctness request, never timed",
            max_x=2.0,
        ),
        wrapped(
            "gen_b1_slow_2x",
            "b1_slow",
            "WRONG",
            "b1_regression",
            "a request alone in flight streams every token twice as slowly",
            b1_margin=b1_margin,
        ),
        wrapped(
            "gen_b1_slow_after_burst",
            "b1_slow_after_burst",
            "WRONG",
            "b1_regression",
            "once it has served two requests at once, a request alone in flight takes twice as"
            " long (a fresh server is as fast as ever)",
            b1_margin=b1_margin,
        ),
        wrapped(
            "gen_b1_slow_untimed",
            "b1_slow_untimed",
            "WRONG",
            "b1_regression",
            f"a lone request takes twice as long at every max_tokens but {int(task.b1.new_tokens)}"
            " (the b1 block's)",
            b1_margin=b1_margin,
            timed_steps=int(task.b1.new_tokens),
        ),
        wrapped(
            "gen_b1_random_slow",
            "b1_random_slow",
            "WRONG",
            "b1_regression",
            f"2 of every 5 lone requests, drawn at random, {RANDOM_SLOW_FACTOR:g} times as slow"
            " (the median untouched)",
            b1_margin=random_slow_margin(float(task.spec.b1_max_regression)),
            slow_factor=RANDOM_SLOW_FACTOR,
        ),
        wrapped(
            "gen_network",
            "network",
            "WRONG",
            "crash",
            "a UDP connect() to TEST-NET-1 at start; exits when it fails",
        ),
        wrapped("gen_hang", "hang", "WRONG", "timeout", "every completion hangs"),
        wrapped(
            "gen_slow_headers",
            "slow_headers",
            "WRONG",
            "timeout",
            "the response's head trickled a byte every 50 ms, never ending (slow loris)",
        ),
        wrapped(
            "gen_slow_body",
            "slow_body",
            "WRONG",
            "timeout",
            "the head at once, then an SSE comment trickled a byte every 50 ms, never ending",
        ),
        wrapped(
            "gen_1xx_flood",
            "flood_1xx",
            "WRONG",
            "protocol",
            "100 Continue responses without end, never the final one",
        ),
        wrapped(
            "gen_status_leak",
            "status_leak",
            "WRONG",
            "protocol",
            "an HTTP status and reason phrase computed from the hidden prompt: neither may"
            " reach the detail",
            detail_excludes=["LEAK", *LEAK_STATUSES],
        ),
        wrapped(
            "gen_odd_chunks",
            "odd_chunks",
            "PASS",
            None,
            "honest, re-framed: odd-sized chunks that events straddle, chunk extensions, a"
            " trailer, 100 and 103 before the 200 (RFC 9112): decoded, no gain",
            max_x=2.0,
        ),
    ]
    if str(OmegaConf.select(task, "server.token_ids", default="token_ids")) == "text":
        mutants.append(
            wrapped(
                "gen_split_chunks",
                "split",
                "PASS",
                None,
                "the same text, one chunk per character: tokens are the baseline's, no gain",
                max_x=2.0,
            )
        )
    if str(OmegaConf.select(task, "server.token_ids", default="token_ids")) != "text" and not (
        _drift(task)
    ):
        mutants.append(
            wrapped(
                "gen_lone_repeat_leak",
                "lone_repeat_leak",
                "WRONG",
                "mismatch",
                "a request alone in flight right after another lone one streams wrong ids"
                " (state kept between two requests of one size)",
            )
        )
    if _drift(task):
        mutants += [
            wrapped(
                "gen_worse_logprobs",
                "worse_logprobs",
                "WRONG",
                "quality",
                "the same tokens, every teacher-forced log-likelihood one nat worse",
            ),
            wrapped(
                "gen_teacher_forced_only",
                "garbage",
                "WRONG",
                "mismatch",
                "perfect teacher-forced likelihoods, every generated id off by one",
            ),
        ]
    mutants += frozen_zone_mutants(template, list(task.frozen))
    return mutants
