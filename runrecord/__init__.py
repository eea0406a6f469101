"""The run record: what a run's files on disk mean, defined once.

A run directory holds ``events.sqlite`` (the schema: ``runrecord.schema``), ``summary.csv`` and
``arms/<arm>/submissions.git``. The runner writes them (``runner.events``, ``runner.summary``);
the analysis reads them (``analysis.tables``). Both take the meaning from here: the pseudo-agent
names and table labels (``runrecord.names``), the seats (``runrecord.seats``), the model-call
outage rule (``runrecord.model_calls``), relays (``runrecord.relays``) and the per-arm facts
(``runrecord.facts``). This package imports neither ``runner`` nor ``analysis``: it describes
files, so the analysis still reads only what a run wrote.
"""

from __future__ import annotations

from runrecord.facts import (
    ARMS_NAMES,
    JUDGED_FIELDS,
    SHARED_COLUMNS,
    SUMMARY_DIGITS,
    ArmFacts,
    Judged,
    ModelCallFacts,
    Phase,
    Submitted,
    agents_phase,
    arm_facts,
    best_pass,
    busy_seconds,
    judge_noise,
    judged_rows,
    model_call_facts,
    optional,
    summary_value,
)
from runrecord.model_calls import SeatOutage, failed, seat_outages
from runrecord.names import (
    BASELINE,
    CHAMPION,
    LEGACY_AGENTS,
    LEGACY_COLUMNS,
    LEGACY_META,
    PSEUDO_AGENTS,
    REJUDGE,
    REJUDGING_AGENTS,
    REJUDGING_STARTED_AT,
    agent_kind_label,
    agent_name,
    current_columns,
    isolation_label,
    rejudging_started_at,
)
from runrecord.relays import (
    CommitGraph,
    relay_count,
    relay_pairs,
    start_commit,
    submission_parents,
)
from runrecord.schema import (
    LATER_COLUMNS,
    OPTIONAL_TABLES,
    SCHEMA,
    columns,
    event_tables,
    upgrade,
)
from runrecord.seats import SeatRecord, arm_agent_kind, arm_scripted, run_config, seat_records

__all__ = [
    "ARMS_NAMES",
    "BASELINE",
    "CHAMPION",
    "JUDGED_FIELDS",
    "LATER_COLUMNS",
    "LEGACY_AGENTS",
    "LEGACY_COLUMNS",
    "LEGACY_META",
    "OPTIONAL_TABLES",
    "PSEUDO_AGENTS",
    "REJUDGE",
    "REJUDGING_AGENTS",
    "REJUDGING_STARTED_AT",
    "SCHEMA",
    "SHARED_COLUMNS",
    "SUMMARY_DIGITS",
    "ArmFacts",
    "CommitGraph",
    "Judged",
    "ModelCallFacts",
    "Phase",
    "SeatOutage",
    "SeatRecord",
    "Submitted",
    "agent_kind_label",
    "agent_name",
    "agents_phase",
    "arm_agent_kind",
    "arm_facts",
    "arm_scripted",
    "best_pass",
    "busy_seconds",
    "columns",
    "current_columns",
    "event_tables",
    "failed",
    "isolation_label",
    "judge_noise",
    "judged_rows",
    "model_call_facts",
    "optional",
    "rejudging_started_at",
    "relay_count",
    "relay_pairs",
    "run_config",
    "seat_outages",
    "seat_records",
    "start_commit",
    "submission_parents",
    "summary_value",
    "upgrade",
]
