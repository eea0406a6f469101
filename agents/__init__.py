"""Seat adapters: the programs that sit in an arm's seats, and the tools they use.

- ``tools/``: ``submit``, ``board`` and ``verdicts``, the small standard-library programs on
  every agent's PATH (``/opt/swarmlab/bin``). They only write requests into the agent's outbox
  and read its inbox and the arm's board; the runner's gateway does the rest
  (``docs/agent-workspace.md``).
"""

from __future__ import annotations

__all__: list[str] = []
