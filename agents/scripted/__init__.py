"""The scripted agent: a program, no model, that plays a worker or a critic through the same
tools a real agent uses (``submit``, ``board``, ``verdicts``; ``docs/agent-workspace.md``).

    python -I agents/scripted --role worker|critic --direction D --seed N --moves DIR
                                 [--deadline EPOCH]

Standard library and ``git`` only: it runs inside the agent's container, with the tools on
``PATH``, the task's move library (``tasks/<task>/moves/``: ``moves.json`` and the patches)
mounted read-only at ``--moves``, and the task card in ``SWARMLAB_TASK_CARD`` (frozen zone,
build and serve commands, vocabulary, directions: ``card.py``, ``docs/scripted-agent.md``). It
knows no task by name.

Modules, one job each: ``card`` (the task card), ``library`` (moves, sweeps, check, probe),
``git`` (the clone), ``tools`` (``submit``, ``board``, ``verdicts``), ``notes`` (what survives a
restart), ``agent`` (what both roles share), ``submissions`` (submitting, verdicts, settling
after a restart), ``worker``, ``probe`` (one engine served), ``critic``, ``cli``.

A **worker** loops until the deadline, on a branch ``scripted`` of its clone. It reads the
board; when another agent posted a PASS that holds a move its own direction's next moves
require (even one slower than its base: what it had is redone on top, as a person rebases onto
a teammate's restructure rather than write it twice), or, on a seeded draw, a PASS clearly
faster than its base, it fetches that commit from ``/work/submissions.git``
(``refs/submissions/<author>/<n>``), resets onto it and posts a ``relay``. It then picks the
next untried move of its direction (once those run out, of any direction, as an integrator
would; first steps first) whose requirements its base holds,
applies the patch with ``git apply --3way``, commits (a ``Move:`` trailer names the move),
runs ``submit --wait`` and posts the ``result``. A conflict or an unmet requirement is a
``dead_end`` pinned to the base commit and the move, and so is a PASS no faster than its base.
When its own direction's next moves need a move a teammate has already submitted (a
``refs/submissions/<author>/<n>`` whose ``Move:`` trailers hold it, with no ``result`` on the
board yet), it posts that it waits and waits for that verdict instead of doing the same work
twice: a PASS is relayed onto; anything else ends the wait and it goes on
(the wait ends on a verdict, a count; ``SWARMLAB_SCRIPTED_WAIT_S`` only bounds a teammate that
never posts).
The best PASS becomes the base. A critic's ``review`` that finds a bug in a commit makes it drop
any base built on that commit (or holding the move the critic blames) and never relay onto one.
Out of moves, it sweeps the library's parameters on its best engine, retries moves that did not
apply on an older base, then watches the board for something to build on; only when nothing at
all is left does it exit 0 (the supervisor restarts it with ``SWARMLAB_KEEP_GOING=1``; it then
continues from its notes and the board, never starting over).

**Never the same tree twice.** A worker never submits a tree (the code, whatever the commit)
that it or another agent of its arm already submitted: the arm's submissions are in
``/work/submissions.git``, its own in its notes (a tree whose only verdict was ERROR, the
judge's fault, may go again). Each submission is written to its notes as ``submitting`` (commit
and tree) *before* the request is made, so a kill at any point is settled on restart: a request
still in the outbox is waited for, the gateway's reply or its ``refs/submissions/<agent>/<n>``
gives the number, and only a request that never reached the gateway is forgotten (then tried
again). It does not re-measure its base: the runner re-judges every arm's best itself.

Reaching the target is not a reason to stop. Choices are deterministic given ``--seed``,
the agent's name and what it reads (``random.Random(f"{seed}:{agent}")``, whose state is saved
in its notes).

A **critic** never submits. For each new PASS a worker posts (the fastest first: it is the one
others will build on), it fetches the commit, builds it with the task's ``build`` and runs the
library's local check (decode_cpu's: ``python -I -B harness/check.py``) from a scratch copy
under ``/tmp`` with a bounded timeout, probes a decode longer than any the judge runs (the
library's ``probe``; decode_cpu's reaches past the KV cache's first size) and compares it with
``master``'s output, inspects the diff for rule-sensitive patterns (state kept across
``reset()``, caches keyed on prompts, module-level state, threads, processes, network, files
written, the clock, frozen-zone edits, top-level modules), and posts a ``review``: ``ok``,
``concern`` or ``bug``; for a bug whose base passes the probe, it names the move to blame. A
commit with the same tree as one already reviewed gets the same finding.

Everything it does is printed on stdout (the supervisor keeps it) and written to its notes
(``NOTES.md`` for people, ``scripted-state.json`` to resume). Its first board message says it
is scripted ("scripted: no model").

Environment: ``SWARMLAB_AGENT`` (its name), ``SWARMLAB_KEEP_GOING``, the tools' path variables
(``SWARMLAB_REPO``, ``SWARMLAB_NOTES``, ``SWARMLAB_SUBMISSIONS``, ...; defaults ``/work/...``),
and knobs for tests: ``SWARMLAB_SCRIPTED_POLL_S`` (board polling, default 5),
``SWARMLAB_SCRIPTED_IDLE_S`` (how long a worker with nothing left watches the board before
exiting, default 120), ``SWARMLAB_SCRIPTED_WAIT_S`` (the longest wait for a teammate's
verdict, default 900), ``SWARMLAB_SCRIPTED_MAX_ACTIONS`` (stop after that many actions),
``SWARMLAB_SCRIPTED_STALL_S`` (a worker's first start sleeps that long after its first message,
doing nothing: the stall the supervisor detects; a keep-going restart does not sleep),
``SWARMLAB_CRITIC_CHECK_TIMEOUT`` (default 600 s), ``SWARMLAB_REPLY_TIMEOUT`` (how long a
request found in the outbox after a restart is waited for, default 120 s, as the tools).
"""

from __future__ import annotations

__all__: list[str] = []
