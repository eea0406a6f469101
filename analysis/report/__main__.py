"""``python -m analysis.report DIR [--out OUT]``: see :func:`analysis.report.main`."""

import sys

from analysis.report import main

sys.exit(main())
