"""Engine protocol server (frozen zone: any change to this file is rejected by the judge).

Run as ``python -I -B harness/serve.py`` from the repository root. It reads one JSON request
per line on stdin and answers one JSON line on the original stdout. The engine's own prints
are sent to stderr, so they can never corrupt the protocol. The judge times each request with
its own clock; nothing this process prints about speed is read.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path


def _protocol_stream():
    """Keep a private copy of stdout for protocol lines; point fd 1 at stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def _check_tokens(tokens, batch: int, steps: int) -> list[list[int]]:
    if not isinstance(tokens, list) or len(tokens) != batch:
        kind = type(tokens).__name__
        raise ValueError(f"decode returned a {kind} of the wrong length, want {batch} rows")
    rows = []
    for row in tokens:
        row = [int(t) for t in row]
        if len(row) != steps:
            raise ValueError(f"decode returned a row of {len(row)} tokens, want {steps}")
        rows.append(row)
    return rows


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    # Appended, not prepended: the standard library and installed packages always win over a
    # file of the same name in the candidate's tree.
    sys.path.append(str(root))
    proto = _protocol_stream()
    from engine import Engine

    engine = Engine()
    batch = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            op = request.get("op")
            if op == "load":
                response = {"ok": True, "info": engine.load() or {}}
            elif op == "prefill":
                prompts = [[int(t) for t in p] for p in request["prompts"]]
                batch = len(prompts)
                engine.prefill(prompts)
                response = {"ok": True}
            elif op == "decode":
                steps = int(request["steps"])
                tokens, margins = engine.decode(steps, margins=bool(request.get("margins")))
                response = {"ok": True, "tokens": _check_tokens(tokens, batch, steps)}
                response["margins"] = (
                    None if margins is None else [[float(m) for m in row] for row in margins]
                )
            elif op == "reset":
                engine.reset()
                batch = 0
                response = {"ok": True}
            else:
                response = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # the judge scores any failure; keep serving the protocol
            traceback.print_exc(file=sys.stderr)
            response = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        proto.write(json.dumps(response) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
