"""Isolation: where agents and the judge run, and what they can see.

Today: the offline base image and the read-only host mounts that let the project's Python run
inside it. Names are loaded on first use, so that ``python -m isolation.images`` runs cleanly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from isolation.images import (
        BASE_TAG,
        DockerUnavailable,
        docker_client,
        ensure_base_image,
        host_python_mounts,
    )

__all__ = [
    "BASE_TAG",
    "DockerUnavailable",
    "docker_client",
    "ensure_base_image",
    "host_python_mounts",
]


def __getattr__(name: str):
    if name in __all__:
        from isolation import images

        return getattr(images, name)
    raise AttributeError(f"module 'isolation' has no attribute {name!r}")
