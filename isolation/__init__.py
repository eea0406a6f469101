"""Isolation: where agents and the judge run, and what they can see.

- ``images``: the offline base image and the read-only host mounts that let the project's
  Python run inside it.
- ``workspace``: an arm's folders on the host (bare origin, submission repo, board, and per
  agent a clone, notes, outbox and inbox), as ``docs/agent-workspace.md`` lays them out.
- ``backends``: where an agent's process runs (``docker``; ``local`` for development only).
- ``gitutil``: git with no host config, stable template commits, and the safe way to take a
  commit out of a repository an agent controls.

Names are loaded on first use, so that ``python -m isolation.images`` runs cleanly.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from isolation.backends import (
        AgentBackend,
        AgentHandle,
        AgentSpec,
        agent_backend,
        get_backend,
    )
    from isolation.gitutil import UntrustedRepoError, fetch_commit, template_repo
    from isolation.images import (
        DockerUnavailable,
        ImageMissing,
        base_tag,
        docker_client,
        ensure_base_image,
        ensure_image,
        host_python_mounts,
        run_container,
    )
    from isolation.workspace import AgentWorkspace, ArmWorkspace, Seat, load_arm, prepare_arm

_WHERE = {
    "DockerUnavailable": "images",
    "ImageMissing": "images",
    "base_tag": "images",
    "docker_client": "images",
    "ensure_base_image": "images",
    "ensure_image": "images",
    "run_container": "images",
    "host_python_mounts": "images",
    "AgentWorkspace": "workspace",
    "ArmWorkspace": "workspace",
    "Seat": "workspace",
    "load_arm": "workspace",
    "prepare_arm": "workspace",
    "template_repo": "gitutil",
    "fetch_commit": "gitutil",
    "UntrustedRepoError": "gitutil",
    "AgentBackend": "backends",
    "AgentHandle": "backends",
    "AgentSpec": "backends",
    "agent_backend": "backends",
    "get_backend": "backends",
}

__all__ = [
    "AgentBackend",
    "AgentHandle",
    "AgentSpec",
    "AgentWorkspace",
    "ArmWorkspace",
    "DockerUnavailable",
    "ImageMissing",
    "Seat",
    "UntrustedRepoError",
    "agent_backend",
    "base_tag",
    "docker_client",
    "ensure_base_image",
    "ensure_image",
    "fetch_commit",
    "get_backend",
    "host_python_mounts",
    "load_arm",
    "prepare_arm",
    "run_container",
    "template_repo",
]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f"isolation.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'isolation' has no attribute {name!r}")
