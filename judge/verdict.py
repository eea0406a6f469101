"""What the judge says about one submission."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from typing import Any


class Verdict(enum.StrEnum):
    """PASS: valid and measured. WRONG: ran, but outputs or limits wrong. REJECT: a rule or
    integrity violation. ERROR: the judge or its infrastructure failed; never charged."""

    PASS = "PASS"
    WRONG = "WRONG"
    REJECT = "REJECT"
    ERROR = "ERROR"


class Outcome(Exception):
    """Raised inside an evaluation to end it with a verdict (WRONG, REJECT or ERROR)."""

    def __init__(self, verdict: Verdict, reason: str, detail: str = "", **flags: Any) -> None:
        super().__init__(f"{verdict} {reason}: {detail}")
        self.verdict = verdict
        self.reason = reason
        self.detail = detail
        self.flags = flags


@dataclass
class Evaluation:
    """The judge's scoring of one submission.

    ``detail`` is safe to show the agent: it never carries anything the candidate printed
    after hidden inputs were sent. ``metrics`` hold only numbers the judge measured itself.
    ``stages`` gives the duration of every stage in seconds. ``metric`` is the task kind's
    :class:`judge.kinds.Metric` as a dict (name, unit, label, higher_is_better): what
    ``metrics["score"]`` counts (empty in a record made before kinds owned their metric).
    """

    job_id: int
    arm: str
    agent: str
    commit: str
    verdict: Verdict
    reason: str = ""
    detail: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, float] = field(default_factory=dict)
    flags: dict[str, Any] = field(default_factory=dict)
    attempts: int = 1
    enqueued_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    label: str = ""
    # The judge settings it was judged under (judge.settings.settings_hash), set by the worker.
    settings_hash: str = ""
    metric: dict[str, Any] = field(default_factory=dict)
    # The job whose evaluation of the same tree (same settings) this one reuses, judged once
    # (judge.service): verdict, reason, detail, metrics and flags are its; no stage ran.
    duplicate_of: int | None = None
    # The git tree id of the commit, read from the judge's own copy of it ("" if unknown).
    tree: str = ""

    @property
    def queue_wait_s(self) -> float:
        return max(0.0, self.started_at - self.enqueued_at)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = str(self.verdict)
        data["queue_wait_s"] = round(self.queue_wait_s, 3)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        data = dict(data)
        data.pop("queue_wait_s", None)
        data["verdict"] = Verdict(data["verdict"])
        return cls(**data)
