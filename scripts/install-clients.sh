#!/usr/bin/env bash
# Installs the agent CLIs the real-client seats and tests use (Claude Code, Codex), at their
# pinned versions, with npm into results/.cache/clients/ (see agents/clients.py). A no-op when
# they are already there; the first time it needs npm and the npm registry (~350 MB download,
# ~810 MB on disk, ~20 s). Usage: scripts/install-clients.sh [claude_code] [codex]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
  echo "install-clients: npm (Node.js) is needed on PATH to install the agent CLIs" >&2
  exit 1
fi
exec "${PY:-.venv/bin/python}" -m agents.clients install "$@"
