"""An ERROR ``timeout_answered`` (a request timed out while the baseline of the moment was not
slow, and only the retry was answered) is re-queued, never charged, once; the same in every
attempt of a job is WRONG ``timeout``. Real queue (SQLite), no Docker: the service's own
decision (``judge.service.charge_repeated_timeouts``) on the reasons the queue logged."""

from __future__ import annotations

import pytest

from judge.queue import JudgeQueue
from judge.sandbox import TimeoutAnswered, answered_retry
from judge.service import charge_repeated_timeouts
from judge.verdict import Evaluation, Verdict


def _error(reason: str, job_id: int = 1) -> Evaluation:
    return Evaluation(
        job_id, "a", "w", "c" * 40, Verdict.ERROR, reason, "decode of case b2 timed out"
    )


def _attempts(queue: JudgeQueue, reasons: list[str]) -> tuple[int, int]:
    """A job claimed once per reason, re-queued with each but the last; (job id, attempts)."""
    job_id = queue.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40)
    attempts = 0
    for i, reason in enumerate(reasons):
        job = queue.claim("cpu")
        assert job is not None and job.id == job_id
        attempts = job.attempts
        if i < len(reasons) - 1:
            queue.requeue(job_id, f"attempt {attempts}", reason)
    return job_id, attempts


@pytest.mark.parametrize(
    ("reasons", "charged"),
    [
        (["timeout_answered"] * 3, True),  # every attempt: slow, not unlucky
        (["timeout_answered"], True),  # judge.max_attempts=1: the one attempt is every attempt
        (["infrastructure", "timeout_answered", "timeout_answered"], False),  # a real fault too
        (["timeout_answered", "timeout_answered", "infrastructure"], False),  # the machine, last
        (["timeout_answered", "judge", "timeout_answered"], False),
    ],
)
def test_only_a_timeout_answered_in_every_attempt_is_charged(tmp_path, reasons, charged):
    queue = JudgeQueue(tmp_path / "q.sqlite")
    job_id, attempts = _attempts(queue, reasons)
    assert attempts == len(reasons)
    assert queue.requeue_reasons(job_id) == reasons[:-1]
    last = _error(reasons[-1], job_id)
    got = charge_repeated_timeouts(last, queue.requeue_reasons(job_id), attempts)
    if charged:
        assert (got.verdict, got.reason) == (Verdict.WRONG, "timeout")
        assert f"each of its {attempts} attempt(s)" in got.detail
        assert last.detail in got.detail  # what the last attempt saw, kept
    else:
        assert got == last


def test_a_verdict_is_never_rewritten():
    passed = Evaluation(1, "a", "w", "c" * 40, Verdict.PASS)
    assert charge_repeated_timeouts(passed, ["timeout_answered"] * 2, 3) == passed
    wrong = Evaluation(1, "a", "w", "c" * 40, Verdict.WRONG, "mismatch")
    assert charge_repeated_timeouts(wrong, ["timeout_answered"] * 2, 3) == wrong


def test_a_job_requeued_by_an_older_queue_reads_as_an_unknown_reason(tmp_path):
    queue = JudgeQueue(tmp_path / "q.sqlite")
    job_id = queue.enqueue(arm="a", agent="w", repo="/r", commit="c" * 40)
    queue.claim("cpu")
    queue.requeue(job_id, "an old worker gave no reason")
    queue.claim("cpu")
    assert queue.requeue_reasons(job_id) == [""]
    got = charge_repeated_timeouts(_error("timeout_answered", job_id), [""], 2)
    assert got.verdict is Verdict.ERROR


def test_noise_in_the_baseline_now_is_not_a_slower_machine():
    # Seen on the stub: a first limit of 3.50 s and a retry limit of 3.51 s (6x the baseline's
    # 0.085 s now + 3 s): not a slower machine, the candidate's own first try.
    assert isinstance(answered_retry("d", 3.50, 3.51), TimeoutAnswered)
    assert isinstance(answered_retry("d", 3.50, 1.5 * 3.50), TimeoutAnswered)
    slow = answered_retry("d", 3.50, 1.5 * 3.50 + 0.01)
    assert not isinstance(slow, TimeoutAnswered) and "machine too slow" in str(slow)
