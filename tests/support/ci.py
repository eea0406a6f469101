"""One rule for a test that cannot run here: under CI it fails (CI must run every test: a
missing engine, cluster, browser or client is a broken set-up, not a reason to skip), elsewhere
it skips with the reason."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from agents.clients import Client


def in_ci() -> bool:
    """Whether ``CI`` is set (to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def cannot_run(kind: str, needs: str, problem: str) -> NoReturn:
    """Fail (under CI) or skip a ``kind`` test (Docker, SLURM, ...) that needs ``needs``
    (e.g. "a Docker engine") and cannot have it because of ``problem``."""
    if in_ci():
        pytest.fail(f"CI is set and a {kind} test cannot run: {problem}", pytrace=False)
    pytest.skip(f"needs {needs}: {problem}")


def require_client(name: str) -> Client:
    """The agent CLI ``name``, installed (``make clients``), or the test fails/skips."""
    from agents.clients import ClientMissing, get_client

    client = get_client(name)
    try:
        client.binary()
    except ClientMissing as exc:
        cannot_run("real-client", f"the {name} CLI (make clients)", str(exc))
    return client
