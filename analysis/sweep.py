"""A sweep's aggregate across its jobs: ``python -m analysis.sweep DIR``.

A sweep folder (``results/<experiment>/multirun/<timestamp>/``) holds one folder per Hydra job
(``<override_dirname>/``, e.g. ``seed=2``), each a run folder: ``.hydra/``, ``events.sqlite``,
``summary.csv`` and the runner's ``job.json`` (the job's outcome). From these alone,
:func:`aggregate` writes

* ``aggregate.csv``: one row per job and arm: the job's folder, seed, status (``ok``,
  ``failed`` or ``incomplete``), ``job_error`` (why a job failed or is incomplete; ``error`` is
  the summary's count of ERROR verdicts), then the arm's ``summary.csv`` columns (empty for a
  job that wrote none), and how many other jobs of the sweep used the same judge while it ran
  (``concurrent_jobs``: jobs run in parallel share one serial judge, so each got less of it);
* ``aggregate_stats.csv``: per arm, over the ``ok`` jobs, the median best ``x_baseline`` and its
  spread; then the comparison of two arms (``swarm`` vs ``solo`` when both exist) by
  :func:`analysis.stats.compare_arms`, with the tie rule from the judge's measured noise (the
  median of the jobs' ``judge_noise_x_sd``). A job's best is its re-judged best
  (``rejudged_x_baseline``) where the runner re-judged it, else the raw maximum.

An arm of an ``ok`` job with no PASS counts as ``x_baseline`` 1.0 in the statistics (its best
valid engine is still the one it started from), and ``no_pass`` says how often that happened.
An arm the judge never scored in a job (0 evaluations: a judge shared by parallel jobs, or a
budget shorter than one evaluation) is left out of the statistics and counted as ``unjudged``.
Reads only what the jobs wrote to disk; imports nothing of ``runner``.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from runrecord import current_columns

JOB_FILE = "job.json"
AGGREGATE = "aggregate.csv"
STATS = "aggregate_stats.csv"
STATUSES = ("ok", "failed", "incomplete")
LEAD = ["job_dir", "seed", "status", "job_error", "exit_status", "arm"]
TAIL = ["concurrent_jobs", "overrides", "started_at", "ended_at"]
METRIC = "best_x_baseline"  # summary.csv's best (runrecord.row)
REJUDGED = "rejudged_x_baseline"
STATS_COLUMNS = [
    "row", "arm", "jobs", "n", "failed", "incomplete", "unjudged", "no_pass",
    "median_x_baseline", "q1_x_baseline", "q3_x_baseline", "min_x_baseline", "max_x_baseline",
    "arm_a", "arm_b", "difference", "ci_low", "ci_high", "p_value", "min_p", "outcome", "reason",
]  # fmt: skip


class NotASweep(ValueError):
    """The folder holds no job folder (none with ``.hydra/`` or ``job.json``)."""


def is_job_dir(path: Path) -> bool:
    return (path / ".hydra" / "config.yaml").is_file() or (path / JOB_FILE).is_file()


def find_jobs(sweep_dir: Path) -> list[Path]:
    """Every job folder under ``sweep_dir`` (the folder itself for a sweep of one job with no
    override). An override holding a ``/`` nests a job's folder deeper: found too. A job's own
    folders (arms, clones) are never walked."""
    if is_job_dir(sweep_dir):
        return [sweep_dir]
    jobs = []
    for root, dirs, _ in os.walk(sweep_dir):
        here = Path(root)
        if here != sweep_dir and is_job_dir(here):
            jobs.append(here)
            dirs.clear()
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return sorted(jobs)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def read_meta(db: Path) -> dict[str, Any]:
    """The run's metadata from ``events.sqlite`` (read-only), or {} when there is none."""
    if not db.is_file():
        return {}
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
        try:
            rows = con.execute("SELECT key, value FROM meta").fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return {}
    meta = {}
    for key, value in rows:
        try:
            meta[key] = json.loads(value)
        except ValueError:
            meta[key] = value
    return meta


def _summary(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError):
        return []
    # An older run's columns (``confirmed_*``) read under today's names.
    return [current_columns(r) for r in frame.to_dict("records")]


def job_status(
    info: dict[str, Any], meta: dict[str, Any], has_summary: bool
) -> tuple[str, str | None]:
    """(status, error) of one job. The event log wins when it says the run finished (a job
    resumed after a failure is ``ok``); otherwise ``job.json`` says how it ended."""
    if meta.get("status") == "finished" and has_summary:
        return "ok", None
    recorded = info.get("status")
    if recorded == "ok":
        if has_summary:
            return "ok", None
        return "incomplete", "the job reported success but wrote no summary.csv"
    if recorded == "failed":
        return "failed", str(info.get("error") or f"exit status {info.get('exit_status')}")
    if recorded == "interrupted" or meta.get("status") == "interrupted":
        return "incomplete", str(info.get("error") or "interrupted")
    if info or meta:
        return "incomplete", "no outcome: the job was killed, or is still running"
    return "incomplete", "no job.json and no event log: the job never started its run"


def read_job(sweep_dir: Path, job: Path) -> list[dict[str, Any]]:
    """The rows of one job: one per arm (one row with no arm when none is known)."""
    info = _read_json(job / JOB_FILE)
    meta = read_meta(job / "events.sqlite")
    config = _read_yaml(job / ".hydra" / "config.yaml")
    config = config if isinstance(config, dict) else {}
    overrides = info.get("overrides") or _read_yaml(job / ".hydra" / "overrides.yaml") or []
    summary = _summary(job / "summary.csv")
    status, error = job_status(info, meta, bool(summary))
    seed = next(
        (s for s in (info.get("seed"), meta.get("seed"), config.get("seed")) if s is not None), None
    )
    rel = job.relative_to(sweep_dir).as_posix() if job != sweep_dir else "."
    base = {
        "job_dir": rel,
        "seed": seed,
        "status": status,
        "job_error": error,
        "exit_status": info.get("exit_status"),
        "overrides": " ".join(map(str, overrides)),
        "started_at": meta.get("started_at") or info.get("started_at"),
        "ended_at": meta.get("ended_at") or info.get("ended_at"),
        "_judge_home": meta.get("judge_home"),
    }
    if summary:
        # A summary column named like one of ours keeps its value under summary_<name>.
        return [
            {**base, **{(f"summary_{k}" if k in base else k): v for k, v in row.items()}}
            for row in summary
        ]
    arms = meta.get("arms") or list((config.get("arms") or {}).keys()) or [None]
    return [{**base, "arm": arm} for arm in arms]


def _concurrency(rows: list[dict[str, Any]]) -> None:
    """``concurrent_jobs``: other jobs on the same judge whose run overlapped this one's."""
    windows: dict[str, tuple[Any, float, float]] = {}
    for r in rows:
        start, end = r.get("started_at"), r.get("ended_at")
        if r["_judge_home"] and isinstance(start, int | float):
            windows[r["job_dir"]] = (r["_judge_home"], float(start), float(end or math.inf))
    for r in rows:
        mine = windows.get(r["job_dir"])
        if mine is None:
            r["concurrent_jobs"] = None
            continue
        home, start, end = mine
        r["concurrent_jobs"] = sum(
            1
            for other, (h, s, e) in windows.items()
            if other != r["job_dir"] and h == home and s < end and start < e
        )


def collect(sweep_dir: Path) -> pd.DataFrame:
    """The aggregate table of ``sweep_dir``, without writing anything."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise NotASweep(f"{sweep_dir} is not a folder")
    jobs = find_jobs(sweep_dir)
    if not jobs:
        raise NotASweep(
            f"{sweep_dir} holds no job folder (none with .hydra/config.yaml or {JOB_FILE})"
        )
    rows = [row for job in jobs for row in read_job(sweep_dir, job)]
    _concurrency(rows)
    frame = pd.DataFrame.from_records(rows).drop(columns="_judge_home")
    middle = [c for c in frame.columns if c not in LEAD and c not in TAIL]
    frame = frame[[c for c in LEAD + middle + TAIL if c in frame.columns]]
    frame["_seed"] = pd.to_numeric(frame["seed"], errors="coerce")
    frame = frame.sort_values(["_seed", "job_dir"], kind="stable", na_position="last")
    return frame.drop(columns="_seed").reset_index(drop=True)


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(
        frame.get(name, pd.Series(index=frame.index, dtype=float)), errors="coerce"
    )


def _arm_values(frame: pd.DataFrame, arm: str) -> pd.DataFrame:
    """Each ok job's value for ``arm``: the re-judged best (``rejudged_x_baseline``, the median
    of the runner's re-judgements after the deadline) where the job has it, else the raw best."""
    ok = frame[(frame["status"] == "ok") & (frame["arm"] == arm)]
    values = _column(ok, REJUDGED).fillna(_column(ok, METRIC))
    return pd.DataFrame(
        {"job_dir": ok["job_dir"], "value": values, "evaluations": _column(ok, "evaluations")}
    )


def judge_noise(frame: pd.DataFrame) -> float | None:
    """The judge's noise in x_baseline over the sweep: the median over ok jobs of each job's
    ``judge_noise_x_sd`` (the spread of its starting commit's re-judgements); None without."""
    ok = frame[frame["status"] == "ok"]
    sd = _column(ok, "judge_noise_x_sd").dropna()
    return float(sd.median()) if len(sd) else None


def comparison_pair(arms: Sequence[str]) -> tuple[str, str] | None:
    """Which two arms to compare: swarm vs solo when both ran, else the only two arms."""
    if "swarm" in arms and "solo" in arms:
        return "swarm", "solo"
    if len(arms) == 2:
        return arms[0], arms[1]
    return None


def comparison_pairs(arms: Sequence[str]) -> list[tuple[str, str]]:
    """Every comparison to make: :func:`comparison_pair`'s, then with an ``independent`` arm
    (experiment=swarm_vs_independent_vs_solo) swarm vs independent (the board's effect) and
    independent vs solo (the effect of more seats), where those arms ran."""
    pairs = [p for p in [comparison_pair(arms)] if p is not None]
    for pair in (("swarm", "independent"), ("independent", "solo")):
        if set(pair) <= set(arms) and pair not in pairs:
            pairs.append(pair)
    return pairs


def sweep_stats(frame: pd.DataFrame, noise_sigma: float | None = None) -> pd.DataFrame:
    """Per arm the median best ``x_baseline`` and its spread over the ``ok`` jobs; then the
    comparisons of two arms (:func:`comparison_pairs`) on the jobs where both have a value."""
    arms = [a for a in dict.fromkeys(frame["arm"].tolist()) if isinstance(a, str) and a]
    rows: list[dict[str, Any]] = []
    per_arm: dict[str, pd.DataFrame] = {}
    for arm in arms:
        values = _arm_values(frame, arm)
        # The judge never scored this arm in that job (a judge shared by parallel jobs, a short
        # budget): no evidence either way, so it is left out rather than counted as 1.0.
        judged = values["evaluations"].fillna(1) > 0
        unjudged = int((~judged).sum())
        values = values[judged].drop(columns="evaluations")
        no_pass = int(values["value"].isna().sum())
        values["value"] = values["value"].fillna(1.0)
        per_arm[arm] = values
        v = values["value"]
        described = (
            {
                "median_x_baseline": float(v.median()),
                "q1_x_baseline": float(v.quantile(0.25)),
                "q3_x_baseline": float(v.quantile(0.75)),
                "min_x_baseline": float(v.min()),
                "max_x_baseline": float(v.max()),
            }
            if len(v)
            else {}
        )
        mine = frame[frame["arm"] == arm]
        rows.append(
            {
                "row": "arm",
                "arm": arm,
                "jobs": int(mine["job_dir"].nunique()),
                "n": len(v),
                "failed": int((mine["status"] == "failed").sum()),
                "incomplete": int((mine["status"] == "incomplete").sum()),
                "unjudged": unjudged,
                "no_pass": no_pass,
                **described,
            }
        )
    pairs = comparison_pairs(arms)
    for pair in pairs:
        rows.append(_compare(per_arm[pair[0]], per_arm[pair[1]], *pair, noise_sigma))
    if not pairs and len(arms) > 2:
        rows.append(
            {
                "row": "comparison",
                "outcome": "unavailable",
                "reason": f"{len(arms)} arms and no swarm/solo pair: no comparison made",
            }
        )
    stats = pd.DataFrame.from_records(rows, columns=STATS_COLUMNS)
    for name in ("jobs", "n", "failed", "incomplete", "unjudged", "no_pass"):
        stats[name] = stats[name].astype("Int64")
    return stats


def _compare(
    a: pd.DataFrame, b: pd.DataFrame, arm_a: str, arm_b: str, noise_sigma: float | None
) -> dict[str, Any]:
    row: dict[str, Any] = {"row": "comparison", "arm_a": arm_a, "arm_b": arm_b}
    # The same jobs for both arms (each job runs both arms on one seed), in seed order.
    paired = a.merge(b, on="job_dir", suffixes=("_a", "_b"))
    row["n"] = len(paired)
    if paired.empty:
        return {**row, "outcome": "unavailable", "reason": "no ok job holds both arms"}
    try:
        from analysis.stats import compare_arms

        result = compare_arms(
            paired["value_a"].tolist(),
            paired["value_b"].tolist(),
            arm_a=arm_a,
            arm_b=arm_b,
            noise_sigma=noise_sigma,
        )
    except Exception as exc:  # stats not available, or values it refuses: say so, write the rest
        return {**row, "outcome": "unavailable", "reason": f"{type(exc).__name__}: {exc}"}
    for name in ("difference", "ci_low", "ci_high", "p_value", "min_p", "outcome", "reason"):
        row[name] = getattr(result, name, None)
    return row


def aggregate_with_stats(sweep_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write ``aggregate.csv`` and ``aggregate_stats.csv`` into ``sweep_dir``; return both
    tables (aggregate: one row per job and arm; statistics: :func:`sweep_stats`).

    Raises:
        NotASweep: ``sweep_dir`` is not a folder, or holds no job folder.
    """
    sweep_dir = Path(sweep_dir)
    frame = collect(sweep_dir)
    # The tie rule: a gap under 2 sigma of the judge's own measured noise cannot be told apart.
    stats = sweep_stats(frame, judge_noise(frame))
    _write_csv(frame, sweep_dir / AGGREGATE)
    _write_csv(stats, sweep_dir / STATS)
    return frame, stats


def aggregate(sweep_dir: Path) -> pd.DataFrame:
    """Write ``aggregate.csv`` and ``aggregate_stats.csv`` into ``sweep_dir`` and return the
    aggregate: one row per job and arm (see the module's docstring).

    Raises:
        NotASweep: ``sweep_dir`` is not a folder, or holds no job folder.
    """
    return aggregate_with_stats(sweep_dir)[0]


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    frame.to_csv(tmp, index=False)
    tmp.replace(path)


def _cell(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _range(low: Any, high: Any) -> str:
    if _cell(low) == "-":
        return "-"
    return f"{_cell(low, 3)}-{_cell(high, 3)}"


def _table(header: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *lines]
    )


def format_jobs(frame: pd.DataFrame) -> str:
    """One line per job and arm (seed, status, arm, evaluations, best x_baseline), then the
    first line of each failed or incomplete job's error."""
    header = ["job", "seed", "status", "arm", "evaluations", METRIC]
    lines = [
        [
            r["job_dir"],
            _cell(r.get("seed")),
            r["status"],
            _cell(r.get("arm")),
            _cell(r.get("evaluations"), 0),
            _cell(r.get(METRIC)),
        ]
        for r in frame.to_dict("records")
    ]
    out = [_table(header, lines)]
    for r in frame.drop_duplicates("job_dir").to_dict("records"):
        error = r.get("job_error")
        if r["status"] != "ok" and isinstance(error, str) and error:
            out.append(f"{r['status']}: {r['job_dir']}: {error.splitlines()[0]}")
    return "\n".join(out)


def format_stats(stats: pd.DataFrame) -> str:
    """Per arm the median best x_baseline and spread; the comparison in one sentence."""
    out = []
    arms = stats[stats["row"] == "arm"]
    if len(arms):
        header = ["arm", "ok jobs", "failed", "incomplete", "unjudged", "no PASS",
                  "median x_baseline", "IQR", "min-max"]  # fmt: skip
        lines = [
            [
                str(r["arm"]),
                f"{r['n']}/{r['jobs']}",
                str(r["failed"]),
                str(r["incomplete"]),
                str(r["unjudged"]),
                str(r["no_pass"]),
                _cell(r["median_x_baseline"], 3),
                _range(r["q1_x_baseline"], r["q3_x_baseline"]),
                _range(r["min_x_baseline"], r["max_x_baseline"]),
            ]
            for r in arms.to_dict("records")
        ]
        out.append(_table(header, lines))
    for r in stats[stats["row"] == "comparison"].to_dict("records"):
        name = f"{r['arm_a']} vs {r['arm_b']}" if isinstance(r["arm_a"], str) else "comparison"
        if r["outcome"] == "unavailable":
            out.append(f"{name}: unavailable: {r['reason']}")
            continue
        out.append(
            f"{name} on {r['n']} seed(s): difference {_cell(r['difference'], 3)}"
            f" [{_cell(r['ci_low'], 3)}, {_cell(r['ci_high'], 3)}],"
            f" p = {_cell(r['p_value'], 3)} (smallest possible {_cell(r['min_p'], 3)}):"
            f" {r['outcome']}. {r['reason']}"
        )
    return "\n".join(out)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: python -m analysis.sweep SWEEP_DIR", file=sys.stderr)
        return 2
    sweep_dir = Path(argv[0])
    try:
        frame, stats = aggregate_with_stats(sweep_dir)
    except NotASweep as exc:
        print(f"analysis.sweep: {exc}", file=sys.stderr)
        return 2
    print(format_jobs(frame))
    print(format_stats(stats))
    print(f"written: {sweep_dir / AGGREGATE}, {sweep_dir / STATS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
