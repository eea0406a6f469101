#!/usr/bin/env bash
# `make test`: the whole suite in two phases, as one command with one verdict.
#
#   1. the tests that need neither Docker nor SLURM, on TEST_WORKERS processes (pytest-xdist,
#      default 2): none of them times anything, and none shares a port, a path or a global with
#      another (each worker has its own temporary folders and session fixtures);
#   2. the `docker` and `slurm` tests, one at a time as before: they time the judge, so nothing
#      else of the suite runs beside them.
#
# Extra arguments go to both phases (say `-x`, or `-k NAME`). The exit status is the first
# nonzero one of the two phases (pytest's own codes: 1 a test failed, 5 nothing collected...),
# and the last line is pytest's closing line for the two phases together, e.g.
# `==== 1251 passed, 3 skipped in 2100.52s (0:35:00) [both phases] ====`.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
WORKERS=${TEST_WORKERS:-2}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

status=0
"$PY" -m pytest -m "not docker and not slurm" -n "$WORKERS" "$@" 2>&1 | tee "$logs/1"
code=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || status=$code
"$PY" -m pytest -m "docker or slurm" "$@" 2>&1 | tee "$logs/2"
code=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || status=$code

# Both closing lines summed into one, in pytest's own words (a phase with no closing line,
# say one that crashed, makes the sum say so).
"$PY" - "$logs/1" "$logs/2" <<'EOF'
import re
import sys

CLOSING = re.compile(
    r"^=*\s*((?:\d+ \w+)(?:, \d+ \w+)*|no tests ran) in ([0-9.]+)s(?: \([0-9:]+\))?\s*=*$"
)
SAME = {"error": "errors", "warning": "warnings"}
counts: dict[str, int] = {}
seconds = 0.0
for path in sys.argv[1:]:
    found = [m for m in map(CLOSING.match, open(path, errors="replace")) if m]
    if not found:
        key = "phases without a closing line"
        counts[key] = counts.get(key, 0) + 1
        continue
    words, took = found[-1].groups()
    seconds += float(took)
    for number, what in re.findall(r"(\d+) (\w+)", words):
        counts[SAME.get(what, what)] = counts.get(SAME.get(what, what), 0) + int(number)
order = ["failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warnings", "errors"]
parts = [f"{counts[k]} {k}" for k in order if k in counts]
parts += [f"{v} {k}" for k, v in counts.items() if k not in order]
minutes, rest = divmod(int(seconds), 60)
hours, minutes = divmod(minutes, 60)
print(
    f"==== {', '.join(parts) or 'no tests ran'} in {seconds:.2f}s"
    f" ({hours}:{minutes:02d}:{rest:02d}) [both phases] ===="
)
EOF
exit "$status"
