"""A live view of a run or sweep in the browser, read only from what the run writes.

    python -m analysis.view DIR [--port N] [--host H]     # serve it on 127.0.0.1
    python -m analysis.view DIR --export FILE.html        # one self-contained file

- :mod:`~analysis.view.data`: the sections (race, judge, board, submissions, lineage, cost) as
  JSON-ready dicts, from :func:`analysis.tables.build_tables` and the report's helpers;
- :mod:`~analysis.view.server`: the standard library HTTP server (one endpoint per section and a
  cheap ``/api/version`` the page polls);
- :mod:`~analysis.view.page`: the one HTML page (``static/``: plain JavaScript drawing SVG, no
  library, no network), data inlined for an export;
- :mod:`~analysis.view.cli`: the command line.
"""
