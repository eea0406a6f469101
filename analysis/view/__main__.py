"""``python -m analysis.view DIR``: see :mod:`analysis.view`."""

from analysis.view.cli import main

raise SystemExit(main())
