"""``## Model endpoint``: what each arm's calls through the model proxy came to, per run and per
seed of a sweep (from ``tables/model_calls``)."""

from __future__ import annotations

from typing import Any

from analysis.model_calls import SeatOutage, seat_outages
from analysis.report.markdown import num, pct1, table
from analysis.report.measures import call_records, lost_shares, subset
from analysis.tables import RunInfo, Tables

ENDPOINT_INTRO = (
    "Every call a seat made to its model went through the run's model proxy "
    "(`tables/model_calls`). A call failed when the vendor answered 408, 409, 425, 429 or 5xx, "
    "could not be reached, or its stream broke off; an outage runs from a seat's first failed "
    "call to its next answered call (`analysis/model_calls.py`). Seat time = seats × the "
    "agents' phase"
)


ENDPOINT_HEAD = ["arm", "seats", "calls", "failed (by status)", "outages", "seat-min lost",
                  "of seat time"]  # fmt: skip


def has_endpoint(tables: Tables, run: RunInfo) -> bool:
    """Whether the run has a model endpoint to report: it used the proxy or recorded calls."""
    return run.proxied or not tables.model_calls.empty


def endpoint_rows(
    tables: Tables, run: RunInfo
) -> tuple[list[list[Any]], dict[tuple[str, str], SeatOutage]]:
    """One row per arm of one run (``ENDPOINT_HEAD``), and the seats' outages."""
    outages = seat_outages(call_records(tables.model_calls))
    lost = lost_shares(tables, run)
    rows = []
    for r in tables.arms.itertuples(index=False):
        seats = [o for (a, _), o in outages.items() if a == r.arm]
        statuses: dict[str, int] = {}
        for seat in seats:
            for label, n in seat.statuses.items():
                statuses[label] = statuses.get(label, 0) + n
        n_failed = sum(seat.failed for seat in seats)
        by_status = ", ".join(f"{label} ×{n}" for label, n in sorted(statuses.items()))
        lost_s, share = lost.get(r.arm, (None, None))
        rows.append(
            [
                r.arm,
                r.seats,
                sum(seat.calls for seat in seats),
                f"{n_failed} ({by_status})" if n_failed else "0",
                sum(seat.outages for seat in seats),
                num(lost_s / 60 if lost_s is not None else None),
                pct1(share),
            ]
        )
    return rows, outages


def endpoint_section(tables: Tables, run: RunInfo) -> list[str]:
    """``## Model endpoint``: what each arm's calls through the model proxy came to (nothing
    when the run used no proxy and recorded no call)."""
    if not has_endpoint(tables, run):
        return []
    calls = tables.model_calls
    rows, outages = endpoint_rows(tables, run)
    out = [
        "## Model endpoint",
        "",
        f"{ENDPOINT_INTRO} ({num(run.run_seconds)} s).",
        "",
        *table(ENDPOINT_HEAD, rows),
    ]
    hit = [o for o in outages.values() if o.lost_s > 0 or o.open_at_end]
    if hit:
        out += ["", "Seats that lost time:", ""]
        for o in hit:
            shown = ", ".join(f"{label} ×{n}" for label, n in sorted(o.statuses.items()))
            still = "; still failing when its calls ended" if o.open_at_end else ""
            out.append(
                f"- {o.arm}/{o.agent}: {num(o.lost_s)} s in {o.outages} outage(s) "
                f"({o.failed} failed call(s): {shown}){still}."
            )
    out += fair_use_lines(tables, run)
    seatless = int(((calls["arm"] == "") | (calls["agent"] == "")).sum())
    if seatless:
        out += ["", f"{seatless} call(s) without a seat token were refused by the proxy."]
    # A seat asking for a route that is not the model's (the key's other powers) or an upgrade.
    refused = calls[
        (calls["status"] == 403) & (calls["agent"] != "") & calls["upstream_status"].isna()
    ]
    if len(refused):
        counts = refused.groupby(["arm", "agent", "method", "path"]).size()
        shown = "; ".join(f"{a}/{g} {m} {p} ×{n}" for (a, g, m, p), n in counts.items())
        out += [
            "",
            f"{len(refused)} call(s) by seats were refused as not a model route of the API "
            f"(never forwarded): {shown}.",
        ]
    proxy = run.meta.get("proxy") or {}
    firewall = str(proxy.get("host_firewall") or "")
    if firewall.startswith("off"):
        out += [
            "",
            f"Host firewall for the seats' network: {firewall}. Services of the host listening on "
            "all addresses were reachable from the seats at the network's gateway.",
        ]
    errors = proxy.get("record_errors") or []
    seen = proxy.get("calls")
    if errors or (isinstance(seen, int) and seen > len(calls)):
        first = f", the first `{errors[0]}`" if errors else ""
        out += [
            "",
            f"The proxy saw {seen if seen is not None else 'more'} call(s) and the log holds "
            f"{len(calls)} ({len(errors)} record error(s){first}): the counts above are a "
            "lower bound.",
        ]
    return [*out, ""]


def fair_use_lines(tables: Tables, run: RunInfo) -> list[str]:
    """What the seats' fair-use limits cost each arm (``isolation.fair_use``): the seconds its
    calls waited for their seat's slot, and the calls answered 429 past the wait's bound."""
    calls = tables.model_calls
    calls = calls[(calls["run_id"] == run.run_id) & (calls["agent"] != "")]
    limits = (run.meta.get("proxy") or {}).get("fair_use")
    refused = calls["error"].str.startswith("fair use")
    waited = calls["queued_s"].astype(float) > 0
    if not limits and not (waited.any() or refused.any()):
        return []
    words = {"concurrency": "{} in flight", "rpm": "{:g} a minute", "max_wait_s": "waits <= {:g} s"}
    limits = limits if isinstance(limits, dict) else {}
    shown = ", ".join(words[k].format(v) for k, v in limits.items() if k in words and v is not None)
    parts = []
    for arm in run.arms:
        mine = calls["arm"] == arm
        seconds = num(calls.loc[mine, "queued_s"].sum())
        parts.append(
            f"{arm} {int((mine & waited).sum())} call(s) waited {seconds} s in all,"
            f" {int((mine & refused).sum())} answered 429"
        )
    return [
        "",
        f"Fair use of the account (per seat: {shown or '-'}; `isolation/fair_use.py`): "
        + "; ".join(parts)
        + ". A wait is seat time lost to the arm's own share, not to the endpoint.",
    ]


def endpoint_sweep(tables: Tables) -> list[str]:
    """The sweep's ``## Model endpoint``: one row per seed and arm (details in each job's
    report and in ``tables/model_calls``)."""
    rows = []
    for run in tables.runs:
        part = subset(tables, run)
        if has_endpoint(part, run):
            rows += [[run.seed, *row] for row in endpoint_rows(part, run)[0]]
    if not rows:
        return []
    return [
        "## Model endpoint",
        "",
        f"{ENDPOINT_INTRO} (of each job).",
        "",
        *table(["seed", *ENDPOINT_HEAD], rows),
        "",
    ]
