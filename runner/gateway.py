"""The gateway: the only way anything an agent writes reaches the judge, the board or another
agent (``docs/agent-workspace.md``).

Agents drop request files into their own outbox. The gateway, on the host, reads them as
untrusted input: it identifies the author by the outbox the file was found in (never by a
field of the request), refuses oversized, malformed or linked files with a reason, copies a
submitted commit from the agent's clone into the arm's ``submissions.git`` without letting git
read anything else of the agent's repository (:func:`isolation.gitutil.fetch_commit`),
records it in the event log, queues it with the judge, and writes replies, board lines and
verdicts where the agent can only read them.

Crash safety: the event log is the truth. A request file is deleted only after its effect is
recorded and answered, and recording is idempotent per request id, so a gateway killed at any
point redoes the request without doubling anything. The board file and each verdicts file
are re-derived from the log when a gateway starts.

One seat cannot take the others down: whatever goes wrong while serving one of its requests
(a file the gateway cannot read, write or parse, a commit git cannot copy, any other error) is
that request's refusal, recorded as ``request_refused``, never an exception out of
:meth:`Gateway.poll`; a verdict or board line that cannot be written is recorded and written
again at a later poll. Copying a submitted commit runs in a thread of its own, one per seat at
a time (:class:`_Fetch`), so a slow copy holds only its own seat's submissions, and it reads
the seat's objects without following links or blocking
(:func:`isolation.gitutil.fetch_untrusted`). The inboxes lie outside the seats' own
filesystems (``isolation/workspace.py``), and each keeps at most :data:`MAX_REPLIES` replies.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Collection
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isolation.gitutil import SHA_RE, UntrustedRepoError, fetch_commit, fetch_untrusted, git
from isolation.workspace import AgentWorkspace, ArmWorkspace
from judge import Evaluation, JudgeQueue, enqueued_jobs
from runner.events import EventLog

MAX_REQUEST_BYTES = 64 * 1024
MAX_TEXT_CHARS = 16_000
MAX_MESSAGE_CHARS = 2_000
# Requests handled per agent per poll: one agent flooding its outbox cannot starve the others.
MAX_PER_POLL = 32
KINDS = ("note", "result", "review", "dead_end", "relay")
# Replies kept per inbox: beyond it the oldest are deleted (a tool reads its reply at once).
MAX_REPLIES = 1024
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class Refused(Exception):
    """A request the gateway will not carry out; the message is the reason the agent reads."""


def board_line(row: dict[str, Any]) -> dict[str, Any]:
    """A ``messages`` row as the board shows it."""
    refs = row["refs"]
    return {
        "id": row["id"],
        "at": row["at"],
        "author": row["author"],
        "role": row["role"],
        "kind": row["kind"],
        "text": row["text"],
        "refs": json.loads(refs) if isinstance(refs, str) else refs,
    }


def verdict_line(
    submission: int | None, e: Evaluation | dict[str, Any], earlier: int | None = None
) -> dict[str, Any]:
    """The agent-safe part of an evaluation (an ``Evaluation`` or an ``evaluations`` row):
    no stage timings, flags or queue details. A duplicate (the judge reused the verdict of
    the same tree judged before) carries ``duplicate_of``: ``earlier``, the arm's submission
    that was judged, or None when that evaluation is not one of the arm's submissions."""
    if isinstance(e, Evaluation):
        commit, verdict, reason, detail, metrics = (
            e.commit,
            str(e.verdict),
            e.reason,
            e.detail,
            e.metrics,
        )
        duplicate = e.duplicate_of is not None
    else:
        commit, verdict, reason, detail = e["commit_sha"], e["verdict"], e["reason"], e["detail"]
        metrics = json.loads(e["metrics"])
        duplicate = e.get("duplicate_of") is not None
    line = {
        "submission": submission,
        "commit": commit,
        "verdict": verdict,
        "reason": reason,
        "detail": detail,
        "metrics": metrics,
    }
    if duplicate:
        line["duplicate_of"] = earlier
    return line


def _dumps(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, ensure_ascii=False)


def _write_atomic(path: Path, text: str) -> None:
    """Readers (agents, through a read-only mount of the folder) see the old file or the new
    one, never half of it. World-readable whatever the umask."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _append(path: Path, rows: list[dict[str, Any]]) -> None:
    if rows:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("".join(_dumps(r) + "\n" for r in rows))


def mirror_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Make a JSON-lines file hold exactly ``rows``: append what is missing when the file is a
    clean prefix of them, else rewrite it atomically (a torn last line, a foreign line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        text = "\0"
    *complete, partial = text.split("\n")
    have: list[Any] = []
    clean = partial == ""
    for line in complete:
        try:
            have.append(json.loads(line))
        except ValueError:
            clean = False
            break
    if clean and have == rows[: len(have)]:
        _append(path, rows[len(have) :])
    else:
        _write_atomic(path, "".join(_dumps(r) + "\n" for r in rows))


def _read_request(path: str) -> dict[str, Any] | None:
    """Parse one request file without following links or blocking; None if it vanished.

    Raises:
        Refused: a link, not a regular file, too large, not UTF-8 JSON, not an object.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused("the request is a symbolic link: write a regular file") from None
        raise Refused("the request could not be opened") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("the request is not a regular file")
        if info.st_size > MAX_REQUEST_BYTES:
            raise Refused(f"the request is larger than {MAX_REQUEST_BYTES} bytes")
        data = b""
        while len(data) <= MAX_REQUEST_BYTES:
            chunk = os.read(fd, MAX_REQUEST_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_REQUEST_BYTES:
        raise Refused(f"the request is larger than {MAX_REQUEST_BYTES} bytes")
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise Refused("the request is not valid JSON (UTF-8)") from None
    except RecursionError:
        raise Refused("the request is nested too deeply") from None
    if not isinstance(body, dict):
        raise Refused("the request must be a JSON object")
    try:
        # Lone surrogates ("\\ud800") parse, but no UTF-8 file or SQLite text can hold them.
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError, ValueError):
        raise Refused(
            "the request holds text that is not valid Unicode, or is nested too deeply"
        ) from None
    return body


@dataclass
class _Fetch:
    """One seat's submitted commit being copied, in a thread of its own."""

    request_id: str
    commit: str
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def _os_error(exc: BaseException) -> str:
    """An error as the event log records it (the agent's reply never names a host path)."""
    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror}: {exc.filename}"
    return repr(exc)[:500]


def _prune_replies(folder: Path, keep: int) -> int:
    """Delete the oldest replies in ``folder`` beyond the newest ``keep``; how many are left."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(".json") and entry.is_file(follow_symlinks=False):
                try:
                    found.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
                except FileNotFoundError:
                    continue
    found.sort()
    for _, name in found[: max(len(found) - keep, 0)]:
        with suppress(FileNotFoundError):
            os.unlink(folder / name)
    return min(len(found), keep)


def _shown(rows: list[dict[str, Any]], author: str | None) -> list[dict[str, Any]]:
    """The messages a board shows: every one (``author`` None, a shared board), or only
    ``author``'s (a seat's own board in a private arm)."""
    return rows if author is None else [r for r in rows if r["author"] == author]


def fair_key(run_id: str, arm: str) -> str:
    """The key a run's arm takes turns under in the judge's fair queue (see JudgeQueue)."""
    return f"{run_id}/{arm}" if run_id else arm


class Gateway:
    """Carries out agents' requests and delivers verdicts, for every arm of a run.

    Constructing one resumes: board and verdict files are re-derived from the event log, and
    submissions recorded but not yet queued with the judge are queued (or matched with the
    job a crashed gateway had already queued).

    Args:
        events: the run's event log.
        queue: the judge's queue.
        arms: the run's arms (from ``prepare_arm`` or ``load_arm``).
        max_submissions_per_agent: refuse submissions beyond this many per agent (None: no cap).
        evaluations_per_arm: the arm's judge budget: refuse its agents' submissions beyond this
            many (None: no cap). The runner's own re-judgements are not counted.
        evaluations_per_seat: each submitting seat's own judge budget (None: no cap).
        fetch_timeout: seconds allowed to copy one commit from an agent's clone.
        fetch_grace: how long :meth:`poll` waits for a copy it started before it goes on to
            the next request (the reply then comes at a later poll); None: until the copy
            ends (tools and tests that poll once). The runner gives 0: one seat's copy never
            holds another seat's requests.
    """

    def __init__(
        self,
        events: EventLog,
        queue: JudgeQueue,
        arms: list[ArmWorkspace],
        *,
        max_submissions_per_agent: int | None = None,
        evaluations_per_arm: int | None = None,
        evaluations_per_seat: int | None = None,
        fetch_timeout: float = 120.0,
        fetch_grace: float | None = None,
    ) -> None:
        self.events = events
        self.queue = queue
        self.arms = {arm.name: arm for arm in arms}
        if len(self.arms) != len(arms):
            raise ValueError("two arms with the same name")
        self.max_submissions_per_agent = max_submissions_per_agent
        self.evaluations_per_arm = evaluations_per_arm
        self.evaluations_per_seat = evaluations_per_seat
        self.fetch_timeout = fetch_timeout
        self.fetch_grace = fetch_grace
        # The copy in flight (or finished, not yet taken) per (arm, agent): one at a time.
        self._fetches: dict[tuple[str, str], _Fetch] = {}
        # Verdicts and board files that could not be written: re-derived at the next poll.
        self._stale_verdicts: set[tuple[str, str]] = set()
        self._stale_boards: set[str] = set()
        # Seats whose outbox could not be listed (recorded once until it can be again).
        self._unlistable: set[tuple[str, str]] = set()
        self._replies_kept: dict[tuple[str, str], int] = {}
        self._board_last: dict[str, int] = {}
        # Whose turn a job takes in a judge's fair queue shared with other runs.
        self.run_id = str(events.meta().get("run_id") or "")
        # Outbox entries that cannot be deleted (folders): answered once, then skipped.
        self._stuck: set[str] = set()
        self._resume()

    # -- the loop ------------------------------------------------------------------------

    def poll(self) -> int:
        """Handle waiting requests and deliver finished verdicts; returns how many of both
        (a submission whose commit is still being copied counts when it is answered)."""
        done = 0
        for arm in self.arms.values():
            for agent in arm.agents.values():
                done += self._drain(arm, agent)
        self._repair()
        return done + self.deliver()

    def settle(self, timeout: float | None = None) -> int:
        """Wait for every copy in flight (at most ``timeout`` seconds in all, default the
        fetch timeout), then :meth:`poll`: what the agents asked before they were stopped is
        answered. Returns what that poll returns."""
        until = time.monotonic() + (self.fetch_timeout if timeout is None else timeout)
        for fetch in list(self._fetches.values()):
            fetch.done.wait(max(until - time.monotonic(), 0.0))
        return self.poll()

    def _repair(self) -> None:
        """Write again the board and verdicts files that could not be written before."""
        for name in sorted(self._stale_boards):
            if self._mirror_boards(self.arms[name]):
                self._stale_boards.discard(name)
        for arm_name, agent_name in sorted(self._stale_verdicts):
            arm = self.arms[arm_name]
            if self._mirror_verdicts(arm, arm.agents[agent_name]):
                self._stale_verdicts.discard((arm_name, agent_name))

    def _mirror_verdicts(self, arm: ArmWorkspace, agent: AgentWorkspace) -> bool:
        """The agent's verdicts file made to hold exactly the log's; False (and left to
        :meth:`_repair`) when it could not be written."""
        rows = self.events.table(
            "evaluations", "WHERE arm = ? AND agent = ?", (arm.name, agent.name)
        )
        lines = [
            verdict_line(r["submission_id"], r, self._earlier(arm, agent, r.get("duplicate_of")))
            for r in rows
        ]
        try:
            mirror_jsonl(agent.verdicts_file, lines)
        except OSError:
            self._stale_verdicts.add((arm.name, agent.name))
            return False
        return True

    def deliver(self) -> int:
        """Store every finished evaluation of this run's submissions and append it to its
        agent's ``verdicts.jsonl``; returns how many were delivered."""
        delivered = 0
        for row in self.events.pending_jobs():
            arm = self.arms.get(row["arm"])
            if arm is None:
                continue  # another gateway's arm
            evaluation = self.queue.result(row["job_id"])
            if evaluation is None:
                continue
            if self.events.add_evaluation(row["id"], evaluation):
                # The runner's own jobs (the champion re-measured) have no agent to tell.
                agent = arm.agents.get(row["agent"])
                if agent is not None and (arm.name, agent.name) not in self._stale_verdicts:
                    earlier = self._earlier(arm, agent, evaluation.duplicate_of)
                    line = verdict_line(row["id"], evaluation, earlier)
                    try:
                        _append(agent.verdicts_file, [line])
                    except OSError as exc:
                        # Recorded in the log all the same; the file is rewritten from it.
                        self._stale_verdicts.add((arm.name, agent.name))
                        self.events.lifecycle(
                            arm.name, agent.name, "verdict_not_written",
                            submission=row["id"], error=_os_error(exc),
                        )  # fmt: skip
                delivered += 1
        return delivered

    def _earlier(self, arm: ArmWorkspace, agent: AgentWorkspace, job_id: int | None) -> int | None:
        """The arm's submission judged as job ``job_id`` (what a duplicate reuses), if any;
        in a private arm only the seat's own (another seat's submissions are not its to know)."""
        if job_id is None:
            return None
        rows = self.events.table("submissions", "WHERE job_id = ? AND arm = ?", (job_id, arm.name))
        if arm.private:
            rows = [r for r in rows if r["agent"] == agent.name]
        return rows[0]["id"] if rows else None

    # -- requests ------------------------------------------------------------------------

    def _drain(
        self,
        arm: ArmWorkspace,
        agent: AgentWorkspace,
    ) -> int:
        key = (arm.name, agent.name)
        try:
            with os.scandir(agent.outbox) as entries:
                names = sorted(
                    entry.name
                    for entry in entries
                    if entry.name.endswith(".json")
                    and str(agent.outbox / entry.name) not in self._stuck
                )
        except FileNotFoundError:
            return 0
        except OSError as exc:
            if key not in self._unlistable:
                self._unlistable.add(key)
                self.events.lifecycle(
                    arm.name, agent.name, "request_refused", request="",
                    error="the outbox could not be read", detail=_os_error(exc),
                )  # fmt: skip
            return 0
        self._unlistable.discard(key)
        fetch = self._fetches.get(key)
        if fetch is not None and fetch.done.is_set() and f"{fetch.request_id}.json" not in names:
            del self._fetches[key]  # its request was withdrawn while its commit was copied
        answered = 0
        for name in names[:MAX_PER_POLL]:
            answered += self._handle(arm, agent, name)
        return answered

    def _handle(
        self,
        arm: ArmWorkspace,
        agent: AgentWorkspace,
        name: str,
    ) -> int:
        """Carry out one request: 1 when it was answered (or dropped), 0 while its commit is
        still being copied. Nothing raised while serving it leaves this method (but a failure
        of the event log itself): any error is the request's refusal, recorded."""
        path = agent.outbox / name
        request_id = name[: -len(".json")]
        answerable = bool(REQUEST_ID_RE.match(request_id))
        detail: dict[str, Any] = {}
        try:
            body = _read_request(str(path))
            if body is None:
                return 0
            if not answerable:
                raise Refused("bad request id: letters, digits, '.', '_', '-' (at most 128)")
            if body.get("id") != request_id:
                raise Refused("the request's id must equal its file name (<id>.json)")
            op = body.get("op")
            if op == "submit":
                reply = self._submit(arm, agent, request_id, body)
                if reply is None:
                    return 0  # its commit is still being copied: answered at a later poll
            elif op == "post":
                reply = self._post(arm, agent, request_id, body)
            else:
                raise Refused(f"unknown op {op!r}: use submit or post")
        except Refused as exc:
            reply = {"ok": False, "error": str(exc)}
        except sqlite3.Error:
            raise  # the event log itself failed: the run's problem, not this seat's
        except Exception as exc:  # one seat's request never ends the run
            reply = {"ok": False, "error": "the gateway could not carry out this request"}
            detail = {"detail": _os_error(exc) if isinstance(exc, OSError) else repr(exc)[:500]}
        if not reply["ok"]:
            self.events.lifecycle(
                arm.name, agent.name, "request_refused",
                request=request_id[:128], error=reply["error"], **detail,
            )  # fmt: skip
        if answerable:
            self._reply(arm, agent, request_id, reply)
        self._remove(path)
        return 1

    def _reply(
        self, arm: ArmWorkspace, agent: AgentWorkspace, request_id: str, reply: dict[str, Any]
    ) -> None:
        """Write the reply into the agent's inbox (one that cannot be written is recorded).
        The inbox keeps the newest :data:`MAX_REPLIES` replies: a flood of requests does not
        grow it without end."""
        try:
            _write_atomic(agent.replies / f"{request_id}.json", json.dumps(reply) + "\n")
        except OSError as exc:
            self.events.lifecycle(
                arm.name, agent.name, "reply_not_written",
                request=request_id[:128], ok=bool(reply.get("ok")), error=_os_error(exc),
            )  # fmt: skip
            return
        key = (arm.name, agent.name)
        kept = self._replies_kept.get(key, MAX_REPLIES) + 1  # not counted yet: look first
        if kept > MAX_REPLIES:
            kept = _prune_replies(agent.replies, MAX_REPLIES)
        self._replies_kept[key] = kept

    def _remove(self, path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            self._stuck.add(str(path))

    def _submit(
        self,
        arm: ArmWorkspace,
        agent: AgentWorkspace,
        request_id: str,
        body: dict[str, Any],
    ) -> dict[str, Any] | None:
        """The reply to a submit request, or None while its commit is being copied (or the
        seat's previous submission's still is: one copy per seat at a time)."""
        if not agent.can_submit:
            raise Refused(f"a {agent.role} does not submit (only workers do)")
        commit = body.get("commit")
        if not isinstance(commit, str) or not SHA_RE.match(commit):
            raise Refused("commit must be a full 40-hex sha (the submit tool resolves it)")
        message = body.get("message", "")
        if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
            raise Refused(f"message must be text of at most {MAX_MESSAGE_CHARS} characters")
        key = f"{arm.name}/{agent.name}/{request_id}"  # ids are unique per agent only
        seen = self.events.table("submissions", "WHERE request_id = ?", (key,))
        if seen and seen[0]["commit_sha"] != commit:
            raise Refused(f"request id {request_id} was already used for another commit")
        if not seen:
            self._check_caps(arm, agent)
            seat = (arm.name, agent.name)
            fetch = self._fetches.get(seat)
            if fetch is not None and (not fetch.done.is_set() or fetch.request_id != request_id):
                return None  # this seat's copy is in flight (this request's or another's)
            if fetch is None or fetch.commit != commit:
                # Into a staging ref first: a commit that cannot be copied never becomes a
                # submission, and one that was copied is never collected as garbage.
                self._fetches[seat] = fetch = self._start_fetch(arm, agent, request_id, commit)
                if not fetch.done.wait(self.fetch_grace):
                    return None
            del self._fetches[seat]
            if isinstance(fetch.error, UntrustedRepoError):
                raise Refused(f"{fetch.error} (/work/repo)")
            if fetch.error is not None:
                raise fetch.error
            self._check_caps(arm, agent)  # another seat's copy may have been taken first
        submission, job = self.events.add_submission(arm.name, agent.name, key, commit, message)
        self._publish(arm, agent.name, submission, commit)
        if job is None:
            self._enqueue(arm, agent.name, submission, commit)
        return {"ok": True, "submission": submission, "commit": commit}

    def _check_caps(self, arm: ArmWorkspace, agent: AgentWorkspace) -> None:
        """Refuse a new submission beyond the seat's cap or the arm's or seat's judge budget."""
        if self.max_submissions_per_agent is not None:
            made = self.events.table(
                "submissions", "WHERE arm = ? AND agent = ?", (arm.name, agent.name)
            )
            if len(made) >= self.max_submissions_per_agent:
                raise Refused(
                    f"submission cap reached ({self.max_submissions_per_agent} per agent)"
                )
        if (
            self.evaluations_per_arm is not None
            and len(self._agent_submissions(arm)) >= self.evaluations_per_arm
        ):
            raise Refused(
                f"the arm's judge budget is spent ({self.evaluations_per_arm} evaluations"
                " per arm): nothing more will be judged in this run"
            )
        if (
            self.evaluations_per_seat is not None
            and len(self._agent_submissions(arm, agent.name)) >= self.evaluations_per_seat
        ):
            raise Refused(
                f"your judge budget is spent ({self.evaluations_per_seat} evaluations per"
                " seat): nothing more of yours will be judged in this run"
            )

    def _start_fetch(
        self, arm: ArmWorkspace, agent: AgentWorkspace, request_id: str, commit: str
    ) -> _Fetch:
        """Copy ``commit`` from the agent's clone into ``refs/incoming/<agent>`` of the arm's
        ``submissions.git``, in a thread of its own (a daemon: it never holds the runner's
        exit; git's own timeout ends it)."""
        fetch = _Fetch(request_id, commit)

        def copy() -> None:
            try:
                fetch_untrusted(
                    agent.repo,
                    commit,
                    arm.submissions,
                    f"refs/incoming/{agent.name}",
                    timeout=self.fetch_timeout,
                    scratch=arm.root,  # never mounted into any container
                )
            except BaseException as exc:  # handed to the main loop
                fetch.error = exc
            finally:
                fetch.done.set()

        threading.Thread(target=copy, name=f"fetch-{arm.name}-{agent.name}", daemon=True).start()
        return fetch

    def _agent_submissions(
        self, arm: ArmWorkspace, agent: str | None = None
    ) -> list[dict[str, Any]]:
        """The submissions of the arm's own agents (not the runner's re-judgements), or of
        one of them."""
        names = [agent] if agent is not None else sorted(arm.agents)
        marks = ",".join("?" * len(names))
        return self.events.table(
            "submissions", f"WHERE arm = ? AND agent IN ({marks})", (arm.name, *names)
        )

    def budget_spent(self) -> bool:
        """True when every arm had its whole judge budget submitted and judged: the run is
        over, whatever the clock says. False without such a budget."""
        ends = self.arms_ended()
        return all(why == "evaluations" for why in ends.values())

    def arms_ended(self, spent_seats: Collection[tuple[str, str]] = ()) -> dict[str, str | None]:
        """Why each arm can do nothing more that the judge would score, or None while it can.

        ``"evaluations"``: its judge budget (per arm, or every submitting seat's own) was all
        submitted and judged. ``"budget"``: every submitting seat is ended, each by its token
        or cost budget (``spent_seats``: (arm, seat) pairs, from the supervisor) or its own
        judge budget, with nothing of theirs left to judge. A critic's budget never holds an arm
        back: without workers nothing it writes can be scored.
        """
        spent = set(spent_seats)
        if self.evaluations_per_arm is None and self.evaluations_per_seat is None and not spent:
            # No budget can have ended an arm: no reads (the runner asks four times a second).
            return dict.fromkeys(self.arms)
        waiting = [*self.events.pending_jobs(), *self.events.unqueued_submissions()]
        pending = {(row["arm"], row["agent"]) for row in waiting}
        ends: dict[str, str | None] = {}
        for arm in self.arms.values():
            workers = [name for name, ws in sorted(arm.agents.items()) if ws.can_submit]
            idle = not any((arm.name, name) in pending for name in arm.agents)
            if (
                self.evaluations_per_arm is not None
                and len(self._agent_submissions(arm)) >= self.evaluations_per_arm
                and idle
            ):
                ends[arm.name] = "evaluations"
                continue
            judged_out = {
                name
                for name in workers
                if self.evaluations_per_seat is not None
                and len(self._agent_submissions(arm, name)) >= self.evaluations_per_seat
            }
            done = judged_out | {name for name in workers if (arm.name, name) in spent}
            if not workers or done != set(workers) or not idle:
                ends[arm.name] = None
            else:
                ends[arm.name] = "evaluations" if judged_out == set(workers) else "budget"
        return ends

    def _publish(self, arm: ArmWorkspace, agent: str, submission: int, commit: str) -> None:
        """``refs/submissions/<agent>/<n>``, which other agents fetch for relays."""
        ref = f"refs/submissions/{agent}/{submission}"
        git("update-ref", ref, commit, cwd=arm.submissions)
        git("update-ref", "-d", f"refs/incoming/{agent}", cwd=arm.submissions)
        if arm.private and agent in arm.agents:
            # The seat's own submission repo, the only one it can fetch from, gets its own.
            fetch_commit(arm.submissions, commit, arm.submissions_of(agent), ref)

    def _enqueue(self, arm: ArmWorkspace, agent: str, submission: int, commit: str) -> int:
        job = self.queue.enqueue(
            arm=arm.name,
            agent=agent,
            repo=str(arm.submissions),
            commit=commit,
            label=f"{agent}#{submission}",
            fair_key=fair_key(self.run_id, arm.name),
        )
        self.events.set_job(submission, job)
        return job

    def _post(
        self, arm: ArmWorkspace, agent: AgentWorkspace, request_id: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        text = body.get("text")
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
            raise Refused(f"text must be non-empty text of at most {MAX_TEXT_CHARS} characters")
        kind = body.get("kind", "note")
        if kind not in KINDS:
            raise Refused(f"kind {kind!r} is not one of {', '.join(KINDS)}")
        refs = body.get("refs", {})
        if not isinstance(refs, dict):
            raise Refused("refs must be a JSON object")
        # The author is the owner of the outbox; any author/role field in the body is ignored.
        message, created = self.events.add_message(
            arm.name,
            agent.name,
            agent.role,
            kind,
            text,
            refs,
            request_id=f"{arm.name}/{agent.name}/{request_id}",
        )
        if created:
            self._sync_board(arm)
        return {"ok": True, "message": message}

    def _sync_board(self, arm: ArmWorkspace) -> None:
        """Append the arm's new messages to its board file, or in a private arm each seat's
        to its own (one that cannot be written is rewritten from the log at a later poll: the
        message is recorded all the same)."""
        if arm.name in self._stale_boards:
            return
        rows = self.events.messages(arm.name, since=self._board_last.get(arm.name, 0))
        if rows:
            self._board_last[arm.name] = rows[-1]["id"]
            try:
                for author, board in arm.boards().items():
                    _append(board, [board_line(r) for r in _shown(rows, author)])
            except OSError:
                self._stale_boards.add(arm.name)

    def _mirror_boards(self, arm: ArmWorkspace) -> bool:
        """Every board file of the arm made to hold exactly the log's; False (and left to
        :meth:`_repair`) when one could not be written."""
        rows = self.events.messages(arm.name)
        self._board_last[arm.name] = rows[-1]["id"] if rows else 0
        try:
            for author, board in arm.boards().items():
                mirror_jsonl(board, [board_line(r) for r in _shown(rows, author)])
        except OSError:
            self._stale_boards.add(arm.name)
            return False
        return True

    # -- resume --------------------------------------------------------------------------

    def _resume(self) -> None:
        for arm in self.arms.values():
            self._mirror_boards(arm)
            for agent in arm.agents.values():
                self._mirror_verdicts(arm, agent)
        unqueued = [s for s in self.events.unqueued_submissions() if s["arm"] in self.arms]
        if not unqueued:
            return
        orphans = self._orphan_jobs()
        for sub in unqueued:
            arm = self.arms[sub["arm"]]
            self._publish(arm, sub["agent"], sub["id"], sub["commit_sha"])
            # A gateway killed between enqueue and set_job left a job no submission names.
            # It is matched by arm, agent and commit, enqueued after the submission was made;
            # even a wrong match would be a job scoring the very same commit.
            key = (sub["arm"], sub["agent"], sub["commit_sha"])
            pick = next((p for p in orphans.get(key, []) if p[1] >= sub["at"] - 1.0), None)
            if pick is not None:
                orphans[key].remove(pick)
                self.events.set_job(sub["id"], pick[0])
            else:
                self._enqueue(arm, sub["agent"], sub["id"], sub["commit_sha"])

    def _orphan_jobs(self) -> dict[tuple[str, str, str], list[tuple[int, float]]]:
        taken = {s["job_id"] for s in self.events.table("submissions") if s["job_id"]}
        found: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
        for job in enqueued_jobs(self.queue):
            if job.job_id in taken or job.arm not in self.arms:
                continue
            found.setdefault((job.arm, job.agent, job.commit), []).append((job.job_id, job.at))
        return found
