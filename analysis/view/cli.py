"""The command line of ``python -m analysis.view``."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analysis.tables import Tables
    from analysis.view.server import ViewState

__all__ = ["DEFAULT_PORT", "beside", "export", "main"]

# The project root, so the child finds the package whatever the runner's working folder.
_ROOT = Path(__file__).resolve().parents[2]

#: The port asked for first; the next free one is taken when it is in use.
DEFAULT_PORT = 8765
#: How much the served view lowers its own priority (``os.nice``).
NICE = 10
#: An export carries every evaluation's detail (stages, diff) up to this many evaluations.
EXPORT_DETAILS = 2000


def export(
    path: Path, out: Path, tables: Tables | None = None, plan: dict[str, Any] | None = None
) -> Path:
    """Write the page with every section's data (and the evaluations' details) inlined.

    Args:
        path: A run or sweep directory.
        out: The HTML file to write.
        tables: ``analysis.tables.build_tables(path)`` when the caller has built them
            (``analysis.report``); else built here.
        plan: The planner's view data when the caller has it (``analysis.report``); else
            from the plan's cache in ``path/analysis/plan`` (:func:`plan_view`).

    Returns:
        ``out``.
    """
    from analysis.tables import build_tables
    from analysis.view.data import build_sections, evaluation_detail, plan_view
    from analysis.view.page import render

    if tables is None:
        tables = build_tables(path)
    data: dict = {"sections": build_sections(tables, time.time()), "details": {}}
    data["sections"]["plan"] = plan if plan is not None else plan_view(path)
    ev = tables.evaluations
    if len(ev) <= EXPORT_DETAILS:
        for run_id, job in zip(ev["run_id"], ev["job_id"], strict=True):
            detail = evaluation_detail(tables, run_id, int(job))
            data["details"][f"{run_id}/{int(job)}"] = detail
    # Every seat's page whole (its timeline and transcript): the page pages it itself.
    from analysis.view.seats import seat_page

    now = time.time()
    data["seat_pages"] = {
        f"{run.run_id}/{seat.arm}/{seat.agent}": seat_page(
            tables, run, seat.arm, seat.agent, now, limit=0
        )
        for run in tables.runs
        for seat in run.seats
    }
    out = Path(out)
    out.write_text(render(data), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """Serve (or export) the view of a run or sweep directory; exit 2 for anything else."""
    parser = argparse.ArgumentParser(
        prog="python -m analysis.view",
        description="A live page of a run or sweep: the race, the judge, the board, "
        "submissions, the lineage, the arms' paths, the seats and cost. Reads only what the run "
        "wrote.",
    )
    parser.add_argument("dir", type=Path, help="a run directory or a sweep (multirun) directory")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port")
    parser.add_argument("--host", default="127.0.0.1", help="only on request: the run's data")
    parser.add_argument("--export", type=Path, metavar="FILE.html", help="write one file, exit")
    # The runner's view=true: stop when the process that started us is gone (never outlive it).
    parser.add_argument("--exit-with", type=int, metavar="PID", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # Imported here: ``beside`` (the runner's) costs no pandas import.
    from analysis.tables import is_run_dir, is_sweep_dir

    path: Path = args.dir
    if not (is_run_dir(path) or is_sweep_dir(path)):
        print(
            f"analysis.view: {path}: neither a run directory (no events.sqlite) nor a sweep"
            " (no multirun.yaml with job folders)",
            file=sys.stderr,
        )
        return 2
    if args.export:
        print(f"analysis.view: wrote {export(path, args.export)}")
        return 0
    from analysis.view.server import ViewState, bind

    # A watcher yields the CPU to whatever it watches: the judge beside it times candidates by
    # the wall clock, so the view runs at a lower priority (its pages wait a little when busy).
    with contextlib.suppress(OSError):
        os.nice(NICE)
    state = ViewState(path, background=True)
    try:
        server, busy = bind(state, args.host, args.port)
    except OSError as exc:
        print(f"analysis.view: cannot listen on {args.host}: {exc}", file=sys.stderr)
        return 2
    port = server.server_address[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    if busy:
        taken = ", ".join(map(str, busy))
        print(f"analysis.view: port {taken} in use, took the next free one: {port}", flush=True)
    print(f"analysis.view: http://{host}:{port}/ ({path}; Ctrl-C stops)", flush=True)
    # The first build in the background, so the first page load finds it ready.
    threading.Thread(target=_warm, args=(state,), daemon=True).start()
    if args.exit_with:
        threading.Thread(target=_orphaned, args=(server, args.exit_with), daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _warm(state: ViewState) -> None:
    # A failed first build is shown by the page, which polls again.
    with contextlib.suppress(RuntimeError):
        state.current()


def _orphaned(server: Any, parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    server.shutdown()


#: How long :func:`beside` waits for the view to say its address.
START_S = 60.0


@contextlib.contextmanager
def beside(run_dir: Path, enabled: bool = True, port: int = DEFAULT_PORT) -> Iterator[str | None]:
    """The view of ``run_dir`` served by a child process while the block runs (the runner's
    ``view=true``): its address printed to stderr first, the child stopped after the block.

    A process of its own, so the view's reads (the GIL held while rows become tables) never
    slow the runner's threads, and the terminal's Ctrl-C (which stops the run in order) leaves
    it serving until the run has ended.

    Yields:
        The address (``http://127.0.0.1:PORT/``), or None when not ``enabled`` or the view did
        not start (said on stderr; the run goes on without it).
    """
    if not enabled:
        yield None
        return
    cmd = [sys.executable, "-m", "analysis.view", str(Path(run_dir).resolve()), "--port", str(port)]
    cmd += ["--exit-with", str(os.getpid())]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, text=True, start_new_session=True, cwd=_ROOT
    )
    url = None
    deadline = time.monotonic() + START_S
    assert proc.stdout is not None
    for line in proc.stdout:  # its first lines: a port taken, then the address
        print(line.rstrip(), file=sys.stderr, flush=True)
        found = re.search(r"http://\S+/", line)
        if found:
            url = found.group(0)
            break
        if time.monotonic() > deadline:
            break
    if url is None:
        print("analysis.view: did not start; the run goes on without it", file=sys.stderr)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
