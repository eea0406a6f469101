"""``python -I agents/scripted ...``: run the package's folder (``-I``: no PYTHONPATH).

Python puts this folder first on ``sys.path``; the package is imported from the folder above
``agents/`` instead (``/opt/swarmlab`` in an agent's container, the project on the host), so
its modules' names never shadow the standard library's.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0]).resolve() == HERE:
    sys.path.pop(0)
sys.path.insert(0, str(HERE.parent.parent))

from agents.scripted.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
