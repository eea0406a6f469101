"""Shared test policy: tests marked ``docker`` need a real engine.

Without one they skip (with the reason) on a developer's machine, but fail when ``CI`` is set:
in CI the Docker tests are the point, and a silent skip would prove nothing.
"""

from __future__ import annotations

import functools
import os

import pytest

from isolation import DockerUnavailable, ensure_base_image, images


@functools.cache
def _engine_problem() -> str | None:
    try:
        images.docker_client().close()
    except DockerUnavailable as exc:
        return str(exc)
    return None


def _require_engine() -> None:
    problem = _engine_problem()
    if problem is None:
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"CI is set and a Docker test cannot run: {problem}", pytrace=False)
    pytest.skip(f"needs a Docker engine: {problem}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
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
