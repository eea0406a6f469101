"""The scripted worker: plays moves of its direction, relays onto better PASSes."""

from __future__ import annotations

import re
import time
from typing import Any, Literal

from agents.scripted.library import MoveSpec
from agents.scripted.notes import Attempt, Pass
from agents.scripted.submissions import Submitter
from agents.scripted.util import as_float, as_int, env_float, run, short

# A relay needs a PASS clearly better than one's own base (not judge noise).
RELAY_MARGIN = 1.02
# Chance of relaying onto a better PASS that one does not strictly need.
RELAY_P = 0.35
# Chance of taking the library's next move rather than another eligible one.
FIRST_P = 0.75

Outcome = Literal["acted", "waiting", "idle"]


def conflicted_files(lines: list[str]) -> set[str]:
    """Files a failed ``git apply --3way`` names: ``U path`` or ``patch failed: path:line``."""
    found = set()
    for line in lines:
        match = re.match(r"^U (.+)$", line) or re.search(r"patch failed: ([^:]+):", line)
        if match:
            found.add(match.group(1).strip())
    return found


class Worker(Submitter):
    """Plays moves of its direction (then of any), relays onto better PASSes, never stops."""

    def run(self) -> int:
        if self.state.master is None:
            self.state.master = self.git("rev-parse", "master")
        if self.state.base is None:
            self.state.base = self.state.master
        self.reconcile()  # first what became of a submission being made when we stopped
        self.announce()
        stall = env_float("SWARMLAB_SCRIPTED_STALL_S", 0.0)
        if stall > 0 and not self.keep_going:
            # A test knob, the "pending review" case: alive and doing nothing until nudged (a
            # restart with the keep-going signal does not sleep again).
            self.notes.log(f"pending review: sleeping {stall:.0f} s (SWARMLAB_SCRIPTED_STALL_S)")
            self.sleep(stall)
        # Work on a branch of our own: master stays the starting commit, for anyone looking.
        self.git("checkout", "-q", "-B", "scripted", self.state.base)
        self.git.reset(self.state.base)
        self.settle_pending()
        self.save()
        while self.time_left() > 0 and not self.out_of_actions():
            self.settle_pending()
            self.absorb(self.read_board())
            if self.maybe_relay():
                self.save()
                continue
            outcome = self.act()
            if outcome != "waiting":
                self.state.waiting_since = None
            self.save()
            if outcome == "acted":
                self.state.idle_since = None
                continue
            if outcome == "waiting":
                # Not idle: a teammate's verdict is on its way (a count, not a clock, ends this).
                self.state.idle_since = None
                self.sleep(self.poll)
                continue
            if self.state.idle_since is None:
                self.state.idle_since = time.time()
                self.notes.log("nothing left to try on this base; watching the board for a PASS")
            idle_limit = env_float("SWARMLAB_SCRIPTED_IDLE_S", 120.0)
            if time.time() - self.state.idle_since >= idle_limit:
                self.notes.log("nothing left at all: exiting (the supervisor restarts me)")
                self.state.idle_since = None
                self.save()
                return 0
            self.sleep(self.poll)
        self.notes.log("deadline reached" if self.time_left() <= 0 else "action budget used")
        self.save()
        return 0

    # -- what the board says --

    def absorb(self, rows: list[dict[str, Any]]) -> None:
        """Learn others' PASSes and the critic's findings."""
        for row in rows:
            refs = row.get("refs") or {}
            kind, author = row.get("kind"), row.get("author")
            if kind == "result" and author != self.agent and refs.get("commit"):
                self.state.others_judged.append(str(refs["commit"]))
            if kind == "result" and author != self.agent and refs.get("verdict") == "PASS":
                x, commit = as_float(refs.get("x_baseline")), refs.get("commit")
                if x is not None and commit:
                    moves = [m for m in str(refs.get("moves", "")).split(",") if m]
                    self.state.others.append(
                        Pass(str(author), commit, as_int(refs.get("submission")), x, moves)
                    )
            if kind == "review" and refs.get("finding") == "bug" and refs.get("commit"):
                self.flag(str(refs["commit"]), refs.get("culprit"), row)

    def flag(self, commit: str, culprit: Any, row: dict[str, Any]) -> None:
        """A reviewer found a bug in `commit`: never build on it; leave it if it is our base."""
        if commit in self.state.flagged_commits:
            return
        self.state.flagged_commits.append(commit)
        if isinstance(culprit, str) and culprit in self.library.moves:
            self.state.flagged_moves.append(culprit)
        tainted = self.tainted(self.state.base or "")
        self.notes.log(
            f"{row.get('author')} found a bug in {short(commit)}"
            + (f" (move {culprit})" if culprit else "")
            + ("; my base is built on it" if tainted else "")
        )
        if tainted:
            fallback = [p for p in self.state.passes if not self.tainted(p.commit)]
            best = max(fallback, key=lambda p: p.x, default=None)
            old = self.state.base
            if best is None:
                self.state.base, self.state.base_x = self.state.master, 1.0
                self.state.base_from = "master"
            else:
                self.state.base, self.state.base_x = best.commit, best.x
                self.state.base_from = best.author
            self.git.reset(self.state.base or "master")
            self.state.considered = []  # other PASSes are worth a fresh look from here
            self.tools.post(
                "note",
                f"dropping my base {short(old)}: {row.get('author')} found a bug in "
                f"{short(commit)}; back on {short(self.state.base)} ({self.state.base_x:.2f}x)",
                {"commit": old, "base": self.state.base, "flagged": commit},
            )

    def tainted(self, commit: str) -> bool:
        """Whether `commit` is, or is built on, a commit a reviewer flagged."""
        if not commit:
            return False
        return any(
            self.git.has(bad) and self.git.is_ancestor(bad, commit)
            for bad in self.state.flagged_commits
        ) or bool(set(self.state.flagged_moves) & set(self.git.moves_in(commit)))

    # -- relays --

    def wanted(self, have: set[str]) -> set[str]:
        """Moves our untried moves require that `have` lacks (what a relay could bring)."""
        wanted: set[str] = set()
        for move in self.pool(phase_two=False):
            if move.name not in have and not self.finished(move.name):
                wanted |= set(move.requires) - have
        return wanted

    def maybe_relay(self) -> bool:
        """Build on a teammate's PASS: one that holds a move our own direction's next moves
        need (even when it is slower than our base: what we had is redone on top of it, as a
        person rebases onto a teammate's restructure instead of writing it a second time), or,
        by chance (``RELAY_P``), one clearly faster than our base."""
        base_x = self.state.base_x
        have = set(self.git.moves_in(self.state.base or "HEAD"))
        wanted = self.wanted(have)
        fresh = [
            p
            for p in self.state.others
            if p.commit not in self.state.considered
            and not (set(p.moves) & set(self.state.flagged_moves))
            and p.commit not in self.state.flagged_commits
        ]
        needed = [p for p in fresh if wanted & set(p.moves)]
        better = [p for p in fresh if p.x > base_x * RELAY_MARGIN]
        if not needed and not better:
            return False
        best = max(needed or better, key=lambda p: p.x)
        self.state.considered.extend(p.commit for p in needed + better)
        needs = wanted & set(best.moves)
        draw = self.rng.random()
        if not needs and draw >= RELAY_P:
            return False
        if best.submission is None or not self.git.fetch_submission(
            self.submissions, best.author, best.submission, best.commit
        ):
            return False
        if self.tainted(best.commit):
            return False
        old, old_x = self.state.base, base_x
        self.git.reset(best.commit)
        self.state.base, self.state.base_x, self.state.base_from = best.commit, best.x, best.author
        brought = [m for m in self.git.moves_in(best.commit) if m not in have]
        why = (
            f"it has {', '.join(sorted(needs))}, which my next moves need"
            + ("" if best.x > old_x else "; I redo my own moves on top of it")
            if needs
            else "it beats my base"
        )
        self.state.relays.append(
            {"from": best.author, "commit": best.commit, "x": best.x, "needs": sorted(needs)}
        )
        self.tools.post(
            "relay",
            f"building on {best.author}'s PASS {short(best.commit)} ({best.x:.2f}x, submission "
            f"{best.submission}) instead of my {short(old)} ({old_x:.2f}x): {why}. It brings "
            f"{', '.join(brought) or 'no new moves'}.",
            {
                "from": best.author,
                "commit": best.commit,
                "submission": best.submission,
                "x_baseline": best.x,
                "previous": old,
                "needs": ",".join(sorted(needs)),
            },
        )
        self.notes.log(f"relay onto {best.author}'s {short(best.commit)} ({best.x:.2f}x): {why}")
        return True

    # -- choosing --

    def pool(self, phase_two: bool) -> list[MoveSpec]:
        """Moves of our direction (all of them for ``any``), or of every other direction."""
        names = list(self.library.moves)
        if self.direction == "any":
            mine = names
        else:
            mine = [n for n in names if self.library.moves[n].direction == self.direction]
        if phase_two:
            return self.library.ordered([n for n in names if n not in mine])
        return self.library.ordered(mine)

    def outcomes(self, action: str) -> list[Attempt]:
        return [a for a in self.state.attempts if a.action == action]

    def finished(self, name: str) -> bool:
        """Whether a move is done with for good.

        WRONG or REJECT (a bug or a broken rule does not depend on the base), flagged by a
        reviewer, no faster than its base twice, or an ERROR (the judge's fault) twice. A
        conflict waits for ``retry_variant``. A move that PASSed and was kept stays available:
        after a relay onto a commit that lacks it, it is worth applying again.
        """
        if name in self.state.flagged_moves:
            return True
        tries = self.outcomes("move:" + name)
        if any(a.outcome in ("WRONG", "REJECT", "conflict") for a in tries):
            return True
        if sum(a.outcome == "PASS" and not a.kept for a in tries) >= 2:
            return True
        return sum(a.outcome == "ERROR" for a in tries) >= 2

    def blocked_here(self, name: str) -> bool:
        """Already tried on this very base: it did not apply, lacked a requirement, or PASSed
        no faster than the base."""
        return any(
            a.base == self.state.base
            and a.outcome in ("conflict", "unmet", "PASS", "refused", "duplicate")
            for a in self.outcomes("move:" + name)
        )

    def eligible(self, have: set[str], phase_two: bool) -> list[MoveSpec]:
        return [
            m
            for m in self.pool(phase_two)
            if m.name not in have
            and not self.finished(m.name)
            and not self.blocked_here(m.name)
            and set(m.requires) <= have
        ]

    def pick(self, moves: list[MoveSpec]) -> MoveSpec:
        """Usually the next one in order; sometimes another (seeded)."""
        if len(moves) == 1 or self.rng.random() < FIRST_P:
            return moves[0]
        return moves[1 + self.rng.randrange(len(moves) - 1)]

    def act(self) -> Outcome:
        """Do one thing: ``acted``; ``waiting`` for a teammate's verdict on what our next moves
        need; ``idle`` when nothing is left to do on this base."""
        recent = [a.outcome for a in self.state.attempts[-3:]]
        if len(recent) == 3 and set(recent) == {"refused"}:
            return "idle"  # the gateway refuses our submissions (a cap?): nothing to do
        base = self.state.base or "HEAD"
        have = set(self.git.moves_in(base))
        for phase_two in (False, True):
            moves = self.eligible(have, phase_two)
            if moves:
                self.try_move(self.pick(moves), have)
                return "acted"
            if not phase_two:
                # Our own direction's next moves need something this base lacks: say so once.
                unmet = [
                    m
                    for m in self.pool(phase_two=False)
                    if m.name not in have
                    and not self.finished(m.name)
                    and not self.blocked_here(m.name)
                ]
                missing = sorted(
                    {r for m in unmet for r in m.requires} - have - {m.name for m in unmet}
                )
                key = ",".join(m.name for m in unmet) + "|" + ",".join(missing)
                if unmet and key not in self.state.unmet_posted:
                    self.state.unmet_posted.append(key)
                    self.record_unmet(unmet, have)
                    return "acted"
                if self.awaited(self.wanted(have)):
                    return "waiting"
        if self.try_sweep(have):
            return "acted"
        # No re-measure of the base: that is a tree the arm had judged already, and the runner
        # re-judges every arm's best itself, alike for every arm.
        return "acted" if self.retry_variant(have) else "idle"

    def awaited(self, missing: set[str]) -> list[tuple[str, int, str]]:
        """Teammates' submissions still without a result on the board whose code holds a move
        our own direction needs (`missing`): rather than play that move too, wait for their
        verdict and relay onto it (``maybe_relay``); a non-PASS, or a PASS no faster than our
        base, ends the wait and we do it ourselves. ``SWARMLAB_SCRIPTED_WAIT_S`` (default 900)
        bounds a wait for a teammate that never posts its result."""
        if not missing:
            return []
        if self.state.waiting_since is not None and time.time() - self.state.waiting_since >= (
            env_float("SWARMLAB_SCRIPTED_WAIT_S", 900.0)
        ):
            return []
        judged = set(self.state.others_judged) | {a.commit for a in self.state.attempts}
        pending = []
        for author, number, commit in self.git.submitted(self.submissions):
            if author == self.agent or commit in judged:
                continue
            holds = sorted(missing & set(self.git.moves_in(commit, git_dir=self.submissions)))
            if holds:
                pending.append((author, number, commit, holds))
        if not pending:
            return []
        if self.state.waiting_since is None:
            self.state.waiting_since = time.time()
        for author, number, commit, holds in pending:
            key = f"{author}/{number}"
            if key not in self.state.waits_posted:
                self.state.waits_posted.append(key)
                self.tools.post(
                    "note",
                    f"waiting for {author}'s submission {number} ({short(commit)}): it holds "
                    f"{', '.join(holds)}, which my next moves need; I will build on it if it "
                    "PASSes faster than my base rather than do the same work twice.",
                    {"waiting_for": commit, "author": author, "submission": number},
                )
                self.notes.log(f"waiting for {author}'s submission {number} ({', '.join(holds)})")
        return [(author, number, commit) for author, number, commit, _ in pending]

    # -- doing --

    def commit_message(self, title: str, trailers: dict[str, str]) -> str:
        lines = [title, ""]
        lines += [f"{k}: {v}" for k, v in trailers.items()]
        return "\n".join(lines) + "\n"

    def record_unmet(self, moves: list[MoveSpec], have: set[str]) -> None:
        """A dead end pinned to this base: the moves we would try next need what it lacks."""
        missing = sorted({r for m in moves for r in m.requires} - have - {m.name for m in moves})
        self.state.actions += 1
        for move in moves:
            self.state.attempts.append(
                Attempt(
                    "move:" + move.name,
                    self.state.base or "",
                    time.time(),
                    "unmet",
                    reason="needs " + ",".join(sorted(set(move.requires) - have)),
                )
            )
        names = ", ".join(m.name for m in moves)
        self.tools.post(
            "dead_end",
            f"can't do {names} on {short(self.state.base)} yet: "
            f"{'they need' if len(moves) > 1 else 'it needs'} {', '.join(missing)}, which this "
            "base lacks. Looking for a PASS that has it; meanwhile trying other directions.",
            {
                "move": ",".join(m.name for m in moves),
                "base": self.state.base,
                "reason": "unmet",
                "needs": ",".join(missing),
            },
        )
        self.notes.log(f"{names}: need {', '.join(missing)} (not on {short(self.state.base)})")

    def try_move(self, move: MoveSpec, have: set[str]) -> None:
        base = self.state.base or self.git.head()
        self.state.actions += 1
        self.git.reset(base)
        applied = run(
            ["git", "apply", "--3way", "--whitespace=nowarn", str(move.patch)],
            cwd=self.repo,
            check=False,
        )
        if applied.returncode != 0:
            self.git.reset(base)
            detail = (applied.stdout + applied.stderr).strip().splitlines()
            files = sorted(conflicted_files(detail))
            self.state.attempts.append(
                Attempt(
                    "move:" + move.name,
                    base,
                    time.time(),
                    "conflict",
                    reason="; ".join(detail[-3:])[:300],
                )
            )
            self.tools.post(
                "dead_end",
                f"{move.name} does not apply on {short(base)} (built on "
                f"{', '.join(sorted(have)) or 'master'}): conflict"
                + (f" in {', '.join(files)}" if files else "")
                + ". Pinned: this move, this base.",
                {"move": move.name, "base": base, "reason": "conflict"},
            )
            self.notes.log(f"{move.name}: conflict on {short(base)}")
            return
        commit = self.git.commit_all(
            self.commit_message(
                f"{move.name}: {move.why}",
                {"Move": move.name, "Direction": move.direction, "Base": base, "Agent": self.agent},
            )
        )
        self.submit_and_report("move:" + move.name, move.name, commit, base)

    def try_sweep(self, have: set[str]) -> bool:
        """Vary a parameter of the best engine (the library's sweeps), one value at a time."""
        base = self.state.base or "HEAD"
        for sweep in self.library.sweeps:
            if not set(sweep.after) <= have:
                continue
            for value in sweep.values:
                action = f"sweep:{sweep.name}={value}"
                if any(a.base == base for a in self.outcomes(action)):
                    continue
                self.git.reset(base)
                path = self.repo / sweep.file
                text = path.read_text() if path.is_file() else ""
                if text.count(sweep.old) != 1:
                    break  # this engine no longer has that parameter
                path.write_text(text.replace(sweep.old, sweep.new.format(value=value)))
                self.state.actions += 1
                commit = self.git.commit_all(
                    self.commit_message(
                        f"sweep {sweep.name}={value}: {sweep.why}",
                        {"Sweep": f"{sweep.name}={value}", "Base": base, "Agent": self.agent},
                    )
                )
                self.submit_and_report(action, f"{sweep.name}={value}", commit, base)
                return True
        return False

    def retry_variant(self, have: set[str]) -> bool:
        """Retry a move that was a dead end on an older base, now that the base changed."""
        base = self.state.base or "HEAD"
        for move in self.library.ordered([m for m in self.library.moves if m not in have]):
            if move.name in self.state.flagged_moves or not set(move.requires) <= have:
                continue
            tries = self.outcomes("move:" + move.name)
            if any(a.outcome in ("WRONG", "REJECT") or a.base == base for a in tries):
                continue
            if any(a.outcome in ("PASS", "conflict", "unmet", "ERROR") for a in tries):
                self.notes.log(f"retrying {move.name} on my new base {short(base)}")
                self.try_move(move, have)
                return True
        return False
