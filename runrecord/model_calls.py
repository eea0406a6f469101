"""The time seats lost to a model endpoint that errored or rate-limited, from the calls the
model proxy recorded (``isolation.model_proxy``, table ``model_calls``).

A call *failed* when the vendor answered 408, 409, 425, 429 or 5xx (529 "overloaded"
included), when the proxy could not reach the vendor (502 with an ``error``), when the
vendor's stream broke off, or when the vendor sent an error inside a stream that began as 200
(Anthropic's ``overloaded_error`` event, OpenAI's ``response.failed``). Refusals by the proxy
itself (401 without a seat token, 403 for a route that is not the model's, 413 for a body too
large, 426 for an upgrade) and other 4xx answers are the caller's doing, not the endpoint's:
they are counted as calls, not as failures.

An *outage* of a seat begins with the start of a failed call (the time spent in a call that
failed is lost with it) and ends with the start of that seat's next *generation* call (a model
reply, not a token count or a model listing) that the vendor answered without failing: the
failed calls, the CLI's back-off between them and any restart in between all fall inside it,
whatever the CLI announced. An outage still open when the seat's calls end is closed at the
end of its last failed call. ``lost_s`` is the sum of a seat's outages. Outages are per seat,
not per model: a side call to another model that succeeds ends one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

RETRYABLE = frozenset({408, 409, 425, 429})
# The routes that ask the model for a reply (Messages, Responses, Chat Completions, Gemini).
_GENERATION = re.compile(
    r".*(/messages|/responses|/responses/compact|/chat/completions"
    r"|:generateContent|:streamGenerateContent)"
)


def is_generation(path: str) -> bool:
    """True for a route that asks the model for a reply."""
    return bool(_GENERATION.fullmatch(str(path or "")))


def _unanswered(call: Mapping[str, Any]) -> bool:
    """True when the vendor never answered the call (None, or NaN from pandas)."""
    upstream = call.get("upstream_status")
    return upstream is None or upstream == "" or upstream != upstream


def failed(call: Mapping[str, Any]) -> bool:
    """True when a recorded call failed on the endpoint's side (see the module's text)."""
    upstream = call.get("upstream_status")
    error = str(call.get("error") or "")
    if _unanswered(call):  # unreachable (502), not a refusal by the proxy
        return bool(error) and int(call.get("status") or 0) in (0, 502)
    status = int(upstream)
    return status in RETRYABLE or status >= 500 or error.startswith("vendor stream")


def failure_label(call: Mapping[str, Any]) -> str:
    upstream = call.get("upstream_status")
    if _unanswered(call):
        return "unreachable"
    error = str(call.get("error") or "")
    if error.startswith("vendor stream broke"):
        return f"{int(upstream)} stream broke"
    if error.startswith("vendor stream error: "):
        return f"{int(upstream)} {error.removeprefix('vendor stream error: ')}"
    return str(int(upstream))


@dataclass
class SeatOutage:
    """What one seat's calls through the proxy came to."""

    arm: str
    agent: str
    calls: int = 0
    failed: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    outages: int = 0
    lost_s: float = 0.0
    open_at_end: bool = False


def seat_outages(calls: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], SeatOutage]:
    """Per (arm, agent): calls, failed calls by status, outages and the seconds they lost.
    Calls without a seat (refused for want of a token) are left out."""
    by_seat: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for call in calls:
        if call.get("arm") and call.get("agent"):
            by_seat.setdefault((str(call["arm"]), str(call["agent"])), []).append(call)
    out: dict[tuple[str, str], SeatOutage] = {}
    for (arm, agent), seat_calls in sorted(by_seat.items()):
        seat = out[(arm, agent)] = SeatOutage(arm, agent)
        began: float | None = None
        last_failure_end = 0.0
        for call in sorted(seat_calls, key=lambda c: float(c["started_at"])):
            seat.calls += 1
            start = float(call["started_at"])
            if failed(call):
                seat.failed += 1
                label = failure_label(call)
                seat.statuses[label] = seat.statuses.get(label, 0) + 1
                if began is None:
                    began, last_failure_end = start, start
                last_failure_end = max(last_failure_end, float(call.get("finished_at") or start))
            elif (
                began is not None
                and is_generation(str(call.get("path") or ""))
                and not _unanswered(call)
            ):
                seat.outages += 1
                seat.lost_s += start - began
                began = None
        if began is not None:
            seat.outages += 1
            seat.lost_s += max(0.0, last_failure_end - began)
            seat.open_at_end = True
        seat.lost_s = round(seat.lost_s, 3)
    return out
