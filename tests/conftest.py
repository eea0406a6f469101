"""Shared test policy: tests marked ``docker`` need a real engine, tests marked ``slurm`` a SLURM
controller with a node (``scripts/slurm-cluster.sh ensure``).

Without one they skip (with the reason) on a developer's machine, but fail when ``CI`` is set:
in CI the Docker and SLURM tests are the point, and a silent skip would prove nothing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from isolation import DockerUnavailable, ensure_base_image, images
from tests.support.ci import cannot_run

# The `browser` fixture (headless Chromium) for the view's tests and the demo's.
pytest_plugins = ["tests.support.browser"]


@functools.cache
def _engine_problem() -> str | None:
    try:
        images.docker_client().close()
    except DockerUnavailable as exc:
        return str(exc)
    return None


def _require_engine() -> None:
    problem = _engine_problem()
    if problem is not None:
        cannot_run("Docker", "a Docker engine", problem)


# Where scripts/slurm-cluster.sh writes the test cluster's slurm.conf.
SLURM_TEST_DIR = Path(os.environ.get("SWARMLAB_SLURM_DIR", "/var/spool/swarmlab-slurm"))
SLURM_TEST_CONF = SLURM_TEST_DIR / "slurm.conf"


@functools.cache
def _slurm_problem() -> str | None:
    if "SLURM_CONF" not in os.environ and SLURM_TEST_CONF.is_file():
        os.environ["SLURM_CONF"] = str(SLURM_TEST_CONF)  # the runner's sbatch calls inherit it
    if shutil.which("sinfo") is None:
        return "no SLURM client (sinfo) on PATH: run scripts/slurm-cluster.sh ensure (root)"
    # The node's own slurmd must answer: the controller calls a dead node idle for a while.
    for argv in (["scontrol", "show", "slurmd"], ["sinfo", "-h", "-N", "-o", "%T"]):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            return f"{' '.join(argv)} did not answer in 20 s"
        if out.returncode != 0:
            return f"{' '.join(argv)}: {(out.stderr or out.stdout).strip()[:300]}"
    # completing: a job ending (its processes get KillWait to exit); the node takes the next.
    if not {"idle", "mixed", "allocated", "completing"} & set(out.stdout.split()):
        return f"no SLURM node takes jobs (sinfo: {out.stdout.strip()[:200]})"
    return None


def _require_slurm() -> None:
    problem = _slurm_problem()
    if problem is not None:
        cannot_run("SLURM", "a SLURM cluster (scripts/slurm-cluster.sh ensure)", problem)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slurm"):
        _require_slurm()
    if item.get_closest_marker("docker"):
        _require_engine()


@pytest.fixture(scope="session")
def docker_client():
    _require_engine()
    client = images.docker_client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    return ensure_base_image(docker_client)


@pytest.fixture(scope="session")
def judge_private_dir(tmp_path_factory):
    """One judge private folder for the whole session: setup and preflight happen once."""
    return tmp_path_factory.mktemp("judge-private")


def judge_services(under: Path) -> list[int]:
    """Pids of ``python -m judge serve`` processes whose config file lies under ``under``
    (the runner starts its judge service with ``--config <run dir>/judge.yaml``)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if "judge" in args and "serve" in args and any(a.startswith(str(under)) for a in args):
            pids.append(int(proc.name))
    return pids


def stop_judge_services(under: Path, grace_s: float = 60.0) -> list[int]:
    """SIGTERM every judge service started from a folder under ``under`` (an evaluation in
    progress may finish), SIGKILL what is left after ``grace_s``; returns the pids found."""
    found = judge_services(under)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while judge_services(under) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in judge_services(under):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return found


@pytest.fixture
def find_judge_services():
    """:func:`judge_services`, for tests that check the product stops its services."""
    return judge_services


@pytest.fixture(autouse=True)
def _no_judge_service_outlives_its_test(request):
    """A test that made runs in its ``tmp_path`` leaves no judge service behind, pass or fail
    (a failed demo test once left one running after the suite ended)."""
    # Asked for before the test runs, so that it is torn down after this fixture.
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is not None:
        stop_judge_services(tmp)


def release_seat_mounts(under: Path) -> list[str]:
    """Seats' disk images still mounted under ``under`` (``isolation/quota.py``: a runner
    killed with SIGKILL keeps them for ``resume=``) go back to plain folders."""
    from isolation.quota import IMAGE_SUFFIX, release_all

    prefix = str(under).rstrip("/") + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    seats = [Path(m) for m in mounts if m.startswith(prefix)]
    return release_all(s for s in seats if s.with_name(s.name + IMAGE_SUFFIX).exists())


@pytest.fixture(autouse=True)
def _no_seat_mount_outlives_its_test(request):
    """A test whose runs were killed leaves no seat's disk image mounted, pass or fail."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is not None and os.geteuid() == 0:
        release_seat_mounts(tmp)


def pytest_sessionfinish(session, exitstatus):
    """Whatever a test left running from pytest's temporary folders is stopped at the end."""
    base = (
        session.config._tmp_path_factory.getbasetemp()
        if hasattr(session.config, "_tmp_path_factory")
        else None
    )
    if base is not None:
        stop_judge_services(Path(base), grace_s=30.0)
        if os.geteuid() == 0:
            release_seat_mounts(Path(base))
