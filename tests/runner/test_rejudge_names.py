"""The re-judging's names: today's, or an older run's when it began re-judging under them."""

from __future__ import annotations

from runner.rejudge import rejudging_names


def test_a_run_that_began_rejudging_under_the_older_words_keeps_them() -> None:
    assert rejudging_names({}) == ("rejudge", "rejudge")
    assert rejudging_names({"rejudging_started_at": 1.0}) == ("rejudge", "rejudge")
    # Resumed after its re-judging began as "confirm"/"recheck": no round queued twice.
    assert rejudging_names({"rechecks_started_at": 1.0}) == ("confirm", "recheck")
