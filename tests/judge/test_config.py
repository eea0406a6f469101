"""Judge settings: a value outside its allowed words or range is refused with one clear line."""

from __future__ import annotations

import pytest

from judge import compose_judge_config
from judge.checkout import BadInput


def test_defaults_compose() -> None:
    cfg = compose_judge_config(["task=decode_cpu"])
    assert cfg.judge.b1_alpha == pytest.approx(0.001)


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("judge.queue_policy=fiffo", "use one of fifo, fair"),
        ("judge.b1_unresolved=ignore", "use one of warn, fail"),
        ("judge.near_tie_policy=maybe", "use one of wrong, pass"),
        ("judge.preflight=later", "use one of required, skip"),
        ("judge.pipeline=fast", "use one of naive, staged"),
        ("judge.b1_alpha=0.7", "must lie in (0, 0.5)"),
        ("judge.b1_alpha=0", "must lie in (0, 0.5)"),
        ("judge.prefill_cap_factor=0.9", "must be above 1"),
        ("judge.max_attempts=0", "must be at least 1"),
        ("judge.baseline_timeout_factor=3", "must be at least judge.timeout_factor"),
    ],
)
def test_bad_values_are_refused(override: str, words: str) -> None:
    with pytest.raises(BadInput, match=override.split("=")[0].replace(".", r"\.")) as info:
        compose_judge_config(["task=decode_cpu", override])
    assert words in str(info.value)


def test_a_wrong_type_is_refused_by_the_schema() -> None:
    with pytest.raises(BadInput, match="b1_alpha"):
        compose_judge_config(["task=decode_cpu", "judge.b1_alpha=often"])
