"""A live view of a run or sweep in the browser, read only from what the run writes.

    python -m analysis.view DIR [--port N] [--host H]     # serve it on 127.0.0.1
    python -m analysis.view DIR --export FILE.html        # one self-contained file

- :mod:`~analysis.view.data`: the sections (race, judge, board, submissions, lineage, cost) as
  JSON-ready dicts, from :func:`analysis.tables.build_tables` and the report's helpers;
- :mod:`~analysis.view.live`: the run's tables kept between reads, each read taking only the
  rows the event log gained;
- :mod:`~analysis.view.server`: the standard library HTTP server (one endpoint per section and
  ``/api/changes?since=N``, the page's poll: the rows added since the read it holds);
- :mod:`~analysis.view.page`: the one HTML page (``static/``: plain JavaScript drawing SVG, no
  library, no network), data inlined for an export;
- :mod:`~analysis.view.cli`: the command line, the export (``analysis.report`` writes one
  beside ``report.md``) and :func:`~analysis.view.cli.beside`, the runner's ``view=true``.
"""
