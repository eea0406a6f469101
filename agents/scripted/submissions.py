"""Submitting: a commit to the judge and its verdict on the board, never the same tree twice,
and what became of a submission a restart interrupted (the worker's bookkeeping)."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from agents.scripted.agent import Agent
from agents.scripted.notes import Attempt, Pass
from agents.scripted.util import as_float, as_int, env_float, run, short


class Submitter(Agent):
    """Submits commits and records their verdicts (the worker's base is kept here too)."""

    def submit_and_report(self, action: str, label: str, commit: str, base: str) -> None:
        timeout = max(60.0, self.time_left() + 60.0)
        tree = self.git("rev-parse", commit + "^{tree}")
        earlier = self.judged_trees().get(tree)
        if earlier is not None:
            self.state.attempts.append(
                Attempt(
                    action,
                    base,
                    time.time(),
                    "duplicate",
                    commit=commit,
                    tree=tree,
                    reason=f"same tree as {earlier}",
                )
            )
            self.notes.log(f"{label} on {short(base)}: not submitted, the same code as {earlier}")
            self.git.reset(base)
            return
        attempt = Attempt(action, base, time.time(), "submitting", commit=commit, tree=tree)
        self.state.attempts.append(attempt)
        # On disk before the request exists: a kill from here on is settled by reconcile().
        self.save()
        self.notes.log(f"submit {label} on {short(base)} as {short(commit)}")
        number, verdict, why = self.tools.submit(commit, f"{label} on {short(base)}", timeout)
        attempt.outcome, attempt.submission = "timeout", number
        if number is None and "no reply from the gateway" in why:
            # The request is left in the outbox: the gateway may still take it (reconcile()).
            attempt.outcome, attempt.reason = "submitting", why
            self.notes.log(f"{label}: no reply yet from the gateway")
            self.git.reset(base)
            return
        if number is None:
            attempt.outcome, attempt.reason = "refused", why
            self.notes.log(f"{label}: submission refused: {why}")
            self.git.reset(base)
            if "judge budget is spent" in why:
                # Nothing more will be judged: wait for the run's end instead of asking again.
                self.notes.log("the arm's judge budget is spent: waiting for the run to end")
                while self.time_left() > 0:
                    self.sleep(self.poll)
            return
        if verdict is None:
            # The deadline came first (or the judge is slow): settled later from `verdicts`.
            attempt.reason = why
            self.notes.log(f"{label}: no verdict yet for submission {number}")
            self.git.reset(base)
            return
        self.judge(attempt, verdict, label)

    def judge(self, attempt: Attempt, verdict: dict[str, Any], label: str) -> None:
        """Record a verdict, post the result, keep the commit if it beats the base."""
        metrics = verdict.get("metrics") or {}
        attempt.outcome = str(verdict.get("verdict"))
        attempt.reason = verdict.get("reason")
        attempt.x, attempt.score = (
            as_float(metrics.get("x_baseline")),
            as_float(metrics.get("score")),
        )
        base, commit = attempt.base, attempt.commit or ""
        moves = self.git.moves_in(commit) if commit else []
        if attempt.outcome == "PASS" and attempt.x is not None:
            text = (
                f"PASS {attempt.x:.2f}x ({attempt.score or 0:.1f} {self.card.unit}): {label} on "
                f"{short(base)} ({self.state.base_x:.2f}x) -> {short(commit)}, submission "
                f"{attempt.submission}"
            )
        else:
            first = str(verdict.get("detail") or "").strip().splitlines()
            text = (
                f"{attempt.outcome} {attempt.reason or ''}: {label} on {short(base)} -> "
                f"{short(commit)}, submission {attempt.submission}"
                + (f". {first[0][:300]}" if first else "")
            )
        self.tools.post(
            "result",
            text,
            {
                "verdict": attempt.outcome,
                "reason": attempt.reason,
                "x_baseline": attempt.x,
                "score": attempt.score,
                "commit": commit,
                "submission": attempt.submission,
                "move": label,
                "base": base,
                "base_x": self.state.base_x,
                "moves": ",".join(moves),
                "direction": self.direction,
            },
        )
        better = (
            attempt.outcome == "PASS"
            and attempt.x is not None
            and (attempt.x > self.state.base_x or attempt.action == "rerun")
        )
        if better and attempt.x is not None:
            attempt.kept = True
            if attempt.action != "rerun":
                self.state.passes.append(
                    Pass(self.agent, commit, attempt.submission, attempt.x, moves)
                )
            self.notes.log(f"{label}: PASS {attempt.x:.2f}x, kept (was {self.state.base_x:.2f}x)")
            self.state.base, self.state.base_x, self.state.base_from = (
                commit,
                attempt.x,
                self.agent,
            )
            self.git.reset(commit)
            return
        if attempt.outcome == "PASS":
            self.tools.post(
                "dead_end",
                f"{label} PASSes but is no faster: {attempt.x or 0:.2f}x against my base's "
                f"{self.state.base_x:.2f}x. Dead end for this implementation on this base "
                f"(commit {short(commit)}, base {short(base)}).",
                {
                    "move": label,
                    "base": base,
                    "commit": commit,
                    "reason": "no_faster",
                    "x_baseline": attempt.x,
                },
            )
        said = " ".join(
            part
            for part in (attempt.outcome, attempt.reason, attempt.x and f"{attempt.x:.2f}x")
            if part
        )
        self.notes.log(f"{label}: {said} - back to {short(self.state.base)}")
        self.git.reset(self.state.base or base)

    def judged_trees(self) -> dict[str, str]:
        """Tree -> whose submission it was, for every tree this agent or its arm submitted:
        the gateway's copies (``refs/submissions/<agent>/<n>`` in the arm's read-only
        ``submissions.git``) and this agent's notes (a submission the gateway has not copied
        yet). A submission of ours that got ERROR (the judge's fault) does not count."""
        errors = {
            a.submission
            for a in self.state.attempts
            if a.outcome == "ERROR" and a.submission is not None
        }
        trees: dict[str, str] = {}
        done = run(
            ["git", "--git-dir", str(self.submissions), "for-each-ref",
             "--format=%(refname) %(tree)", "refs/submissions/"],
            check=False,
        )  # fmt: skip
        for line in done.stdout.splitlines():
            ref, _, tree = line.partition(" ")
            parts = ref.split("/")
            if len(parts) != 4 or not tree:
                continue
            author, number = parts[2], as_int(parts[3])
            if author == self.agent and number in errors:
                continue
            owner = "my" if author == self.agent else f"{author}'s"
            trees.setdefault(tree, f"{owner} submission {number}")
        for a in self.state.attempts:
            if a.tree and a.outcome in ("submitting", "timeout", "PASS", "WRONG", "REJECT"):
                trees.setdefault(a.tree, f"my submission {a.submission or '(being made)'}")
        return trees

    def find_submission(self, commit: str) -> tuple[int | None, str | None]:
        """What became of a request to submit `commit` whose answer we never read:
        (number, None) when the gateway took it, (None, why) when it did not."""
        wait = env_float("SWARMLAB_REPLY_TIMEOUT", 120.0)
        until = time.time() + wait
        waited = False
        while True:
            # Still in the outbox: the gateway has not handled it yet; it answers before it
            # deletes the request, so once the file is gone the reply is there.
            queued = False
            for request in self.outbox.glob("*.json"):
                with contextlib.suppress(OSError, ValueError):
                    body = json.loads(request.read_text())
                    queued = queued or (body.get("op") == "submit" and body.get("commit") == commit)
            if not queued or time.time() >= until:
                break
            if not waited:
                waited = True
                self.notes.log(f"my request for {short(commit)} is still in the outbox: waiting")
            time.sleep(min(self.poll, 0.5))
        for reply in (self.inbox / "replies").glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                body = json.loads(reply.read_text())
                if body.get("ok") is True and body.get("commit") == commit:
                    return as_int(body.get("submission")), None
        mine = run(
            ["git", "--git-dir", str(self.submissions), "for-each-ref",
             "--format=%(refname) %(objectname)", f"refs/submissions/{self.agent}/"],
            check=False,
        )  # fmt: skip
        for line in mine.stdout.splitlines():
            ref, _, sha = line.partition(" ")
            if sha == commit:
                return as_int(ref.rsplit("/", 1)[-1]), None
        if queued:
            return None, f"still in the outbox after {wait:.0f} s"
        return None, "never reached the gateway (or it refused it)"

    def reconcile(self) -> None:
        """After a restart: submissions recorded as being made when the agent stopped. The
        gateway's answer says whether each was made; only one it never took is forgotten."""
        for attempt in [a for a in self.state.attempts if a.outcome == "submitting"]:
            number, why = self.find_submission(attempt.commit or "")
            label = attempt.action.split(":", 1)[-1]
            if number is not None:
                attempt.outcome, attempt.submission = "timeout", number
                self.notes.log(f"{label}: submission {number} was made before the restart")
            elif why and why.startswith("still"):
                # Not knowable yet: keep it counted as submitted (its tree is not sent again).
                self.notes.log(f"{label}: its request is {why}")
            else:
                self.state.attempts.remove(attempt)
                self.notes.log(f"{label}: {why}; it may be tried again")
        self.save()

    def settle_pending(self) -> None:
        """Submissions whose verdict came later (while we were away, or after ``submit``
        stopped waiting)."""
        if any(a.outcome == "submitting" for a in self.state.attempts):
            self.reconcile()
        pending = [a for a in self.state.attempts if a.outcome == "timeout" and a.submission]
        if not pending:
            return
        rows = {r.get("submission"): r for r in self.tools.verdicts()}
        for attempt in pending:
            row = rows.get(attempt.submission)
            if row is not None:
                label = attempt.action.split(":", 1)[-1]
                self.judge(attempt, row, label)
