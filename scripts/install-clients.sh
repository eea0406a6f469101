#!/usr/bin/env bash
# Installs the agent CLIs the real-client seats and tests use (Claude Code, Codex, Gemini CLI),
# at their pinned versions, with npm into results/.cache/clients/ (see agents/clis/). A no-op
# when they are already there; the first time it needs npm and the npm registry (~370 MB
# download, ~910 MB on disk, ~25 s). The Gemini CLI then runs on the host's /usr/bin/node (>= 20).
# mini-swe-agent is a PyPI package: pip into a virtual environment of its own made with the
# runner's Python (~420 MB on disk, ~70 s once; needs PyPI, not npm).
# Usage: scripts/install-clients.sh [claude_code] [codex] [gemini] [mini_swe]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$*" != "mini_swe" ] && ! command -v npm >/dev/null 2>&1; then
  echo "install-clients: npm (Node.js) is needed on PATH to install the agent CLIs" >&2
  exit 1
fi
exec "${PY:-.venv/bin/python}" -m agents.clients install "$@"
