"""The time seats lost to a model endpoint that errored or rate-limited: the rule lives in
``runrecord.model_calls`` (the run record's meaning is defined once); this module keeps the
analysis' import path."""

from __future__ import annotations

from runrecord.model_calls import (
    RETRYABLE,
    SeatOutage,
    failed,
    failure_label,
    is_generation,
    seat_outages,
)

__all__ = ["RETRYABLE", "SeatOutage", "failed", "failure_label", "is_generation", "seat_outages"]
