"""The run record: what a run's files on disk mean, defined once.

A run directory holds ``events.sqlite`` (the schema: ``runrecord.schema``), ``summary.csv`` and
``arms/<arm>/submissions.git``. The runner writes them (``runner.events``, ``runner.summary``);
the analysis reads them (``analysis.tables``). Both take the meaning from here: the pseudo-agent
names and table labels (``runrecord.names``), the seats (``runrecord.seats``), the model-call
outage rule (``runrecord.model_calls``), relays (``runrecord.relays``), the per-arm facts
(``runrecord.facts``) and the per-arm row every surface shows (``runrecord.row``). This
package imports neither ``runner`` nor ``analysis``: it describes files, so the analysis still
reads only what a run wrote.
"""

from __future__ import annotations

from runrecord.facts import (
    JUDGED_FIELDS,
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
)
from runrecord.model_calls import SeatOutage, failed, seat_outages
from runrecord.names import (
    BASELINE,
    CHAMPION,
    LEGACY_AGENTS,
    LEGACY_COLUMNS,
    LEGACY_DIVISORS,
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
from runrecord.row import ROW, Column, call_values, csv_value, fact_values, project
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
    "BASELINE",
    "CHAMPION",
    "JUDGED_FIELDS",
    "LATER_COLUMNS",
    "LEGACY_AGENTS",
    "LEGACY_COLUMNS",
    "LEGACY_DIVISORS",
    "LEGACY_META",
    "OPTIONAL_TABLES",
    "PSEUDO_AGENTS",
    "REJUDGE",
    "REJUDGING_AGENTS",
    "REJUDGING_STARTED_AT",
    "ROW",
    "SCHEMA",
    "ArmFacts",
    "Column",
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
    "call_values",
    "columns",
    "csv_value",
    "current_columns",
    "event_tables",
    "fact_values",
    "failed",
    "isolation_label",
    "judge_noise",
    "judged_rows",
    "model_call_facts",
    "optional",
    "project",
    "rejudging_started_at",
    "relay_count",
    "relay_pairs",
    "run_config",
    "seat_outages",
    "seat_records",
    "start_commit",
    "submission_parents",
    "upgrade",
]
