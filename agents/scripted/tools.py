"""The contract's tools on PATH (``submit``, ``board``, ``verdicts``), as calls."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from agents.scripted.util import run, say


class Tools:
    """The contract's tools on PATH: ``submit``, ``board``, ``verdicts``."""

    def post(self, kind: str, text: str, refs: dict[str, Any] | None = None) -> int | None:
        argv = ["board", "post", "--kind", kind]
        for key, value in (refs or {}).items():
            if value is not None:
                argv += ["--ref", f"{key}={value}"]
        done = run([*argv, "--", text], check=False)
        if done.returncode != 0:
            say(f"board post refused ({done.returncode}): {done.stderr.strip()[-200:]}")
            return None
        try:
            return int(done.stdout.split()[0])
        except (IndexError, ValueError):
            return None

    def read(self, since: int) -> list[dict[str, Any]]:
        done = run(["board", "read", "--json", "--since", str(since)], check=False)
        rows = []
        for line in done.stdout.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("id"), int):
                rows.append(row)
        return rows

    def submit(
        self, commit: str, message: str, timeout: float
    ) -> tuple[int | None, dict[str, Any] | None, str]:
        """Submit and wait: (submission number, verdict or None, why there is none)."""
        argv = ["submit", "-m", message[:1900], "--wait", "--timeout", f"{max(timeout, 1):.0f}"]
        done = run([*argv, commit], check=False)
        number, verdict = None, None
        for line in done.stdout.splitlines():
            line = line.strip()
            if number is None and line.isdigit():
                number = int(line)
            elif line.startswith("{"):
                with contextlib.suppress(ValueError):
                    verdict = json.loads(line)
        return number, verdict, done.stderr.strip()[-300:]

    def verdicts(self) -> list[dict[str, Any]]:
        done = run(["verdicts", "--json"], check=False)
        rows = []
        for line in done.stdout.splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        return rows
