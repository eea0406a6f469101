"""The one hardening profile of every container swarmlab starts: the agents' (isolation.backends)
and the judge's evaluation containers (judge.sandbox) alike.

What both need and share is here, once: no capabilities, no new privileges, a read-only root,
a small ``/tmp`` that cannot run programs, one writable and executable build folder
(:data:`isolation.taskenv.BUILD_DIR`), a non-root user, memory with no swap beyond it, a pids
limit, and no network unless one is named. Each side adds its own parts explicitly (name,
mounts, environment, labels, CPU set, its init process or device).
"""

from __future__ import annotations

from typing import Any

from isolation.taskenv import BUILD_DIR


def hardened_options(
    *,
    user: str,
    memory: str,
    pids_limit: int,
    tmp_size: str,
    build_size: str,
    network: str = "none",
) -> dict[str, Any]:
    """docker-py ``containers.run`` keyword arguments of the shared hardening profile.

    Args:
        user: ``uid:gid`` the container's processes run as (never root).
        memory: Memory limit (Docker's notation: ``2g``); swap adds nothing to it.
        pids_limit: Most processes and threads the container may hold at once.
        tmp_size: Size of the ``/tmp`` tmpfs (``64m``): writable, never executable.
        build_size: Size of the build folder's tmpfs (``512m``): writable and executable.
        network: ``none`` or a Docker network (``container:<id>`` joins another's).

    Returns:
        The options; a caller adds its own and may override none of these silently.
    """
    return dict(
        detach=True,
        network_mode=network,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
        tmpfs={
            "/tmp": f"rw,nosuid,nodev,size={tmp_size}",
            # The one writable, executable place: a build's outputs, gone with the container.
            BUILD_DIR: f"rw,nosuid,nodev,exec,size={build_size},mode=1777",
        },
        user=user,
        mem_limit=memory,
        memswap_limit=memory,
        pids_limit=pids_limit,
    )
