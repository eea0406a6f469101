"""Offline container images: an empty root that borrows the host's /usr and Python read-only.

No registry is needed. The base image is a tiny tarball (top-level folders, the merged-/usr
links, a minimal passwd/group) imported into the local engine; containers made from it mount
the host's ``/usr`` and the current interpreter's installation read-only at the same paths (see
:func:`host_python_mounts`), so ``sys.executable`` and the project's dependencies work inside.

``python -m isolation.images`` builds the base image and prints its id.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

BASE_TAG = "swarmlab-base:1"
CONTENT_LABEL = "org.swarmlab.base.content-sha256"

# (path, mode, uid) for every folder of the empty root. /root is traversable (0711) so that a
# non-root user reaches an interpreter mounted under it (pyenv lives in /root/.pyenv here).
_DIRS: tuple[tuple[str, int, int], ...] = (
    ("dev", 0o755, 0),
    ("etc", 0o755, 0),
    ("home", 0o755, 0),
    ("home/agent", 0o755, 1000),
    ("mnt", 0o755, 0),
    ("opt", 0o755, 0),
    ("proc", 0o555, 0),
    ("root", 0o711, 0),
    ("run", 0o755, 0),
    ("scratch", 0o1777, 0),
    ("sys", 0o555, 0),
    ("tmp", 0o1777, 0),
    ("usr", 0o755, 0),
    ("var", 0o755, 0),
    ("var/tmp", 0o1777, 0),
    ("work", 0o755, 0),
)
_LINKS = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
_FILES = {
    "etc/passwd": (
        "root:x:0:0:root:/root:/bin/sh\n"
        "agent:x:1000:1000:agent:/home/agent:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    ),
    "etc/group": "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n",
}
# Image settings given to `docker import` (part of the content hash).
_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
)


class DockerUnavailable(RuntimeError):
    """No Docker engine answers (or the docker client cannot reach it)."""


def docker_client() -> docker.DockerClient:
    """A client for the local engine, or :class:`DockerUnavailable` saying how to start one."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise DockerUnavailable(
            f"No Docker engine answers ({exc}). Start one as root with "
            "`bash scripts/docker-engine.sh start` (or `make setup`); "
            "see README.md, 'Docker engine'."
        ) from exc
    return client


def base_rootfs_tar() -> bytes:
    """The base image's root filesystem as an uncompressed tar, byte-for-byte reproducible."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, kind: bytes, mode: int, uid: int = 0, data: bytes = b"", link=""):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid = kind, mode, uid, uid
            info.mtime, info.linkname, info.size = 0, link, len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)

        for path, mode, uid in _DIRS:
            add(path, tarfile.DIRTYPE, mode, uid)
        for path, target in _LINKS.items():
            add(path, tarfile.SYMTYPE, 0o777, link=target)
        for path, text in _FILES.items():
            add(path, tarfile.REGTYPE, 0o644, data=text.encode())
    return buf.getvalue()


def ensure_base_image(client: docker.DockerClient | None = None, tag: str = BASE_TAG) -> str:
    """Import the base image under ``tag`` unless it is already there with the same content.

    Works offline. Returns the image id.
    """
    import docker

    client = client or docker_client()
    data = base_rootfs_tar()
    digest = hashlib.sha256(data + "\n".join(_CHANGES).encode()).hexdigest()
    try:
        image = client.images.get(tag)
        if (image.labels or {}).get(CONTENT_LABEL) == digest:
            return image.id
    except docker.errors.ImageNotFound:
        pass
    repository, _, version = tag.rpartition(":")
    if not repository or "/" in version:  # no explicit tag: "name" or "host:5000/name"
        repository, version = tag, "latest"
    reply = client.api.import_image_from_data(
        data,
        repository=repository,
        tag=version,
        changes=[*_CHANGES, f"LABEL {CONTENT_LABEL}={digest}"],
    )
    for line in reply.splitlines():
        message = json.loads(line)
        if "error" in message or "errorDetail" in message:
            raise RuntimeError(f"docker import of {tag} failed: {message}")
    return client.images.get(tag).id


def host_python_mounts() -> dict[str, dict]:
    """docker-py ``volumes``: the interpreter's environment, its base install and ``/usr``,
    each read-only at its own path, so that ``sys.executable`` runs in a base-image container.

    Nested paths are dropped (``/usr`` already holds a Debian ``/usr/bin/python3``'s prefix).
    """
    wanted = {"/usr"}
    if os.path.isdir("/etc/alternatives"):
        # Debian's /usr/bin/cc, c++, awk ... are links through /etc/alternatives: without it
        # they dangle in a container (a task's build runs `cc`).
        wanted.add("/etc/alternatives")
    for prefix in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        # The path as Python sees it (what sys.executable names) and where it really lies
        # (the venv's python symlink may point through another link).
        wanted.update({os.path.abspath(prefix), os.path.realpath(prefix)})
    if "/" in wanted:
        raise ValueError("the interpreter lives at / : mounting the host root is not isolation")
    kept: list[str] = []
    for path in sorted(wanted):  # a parent sorts before its children
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return {path: {"bind": path, "mode": "ro"} for path in kept}


def main() -> int:
    try:
        print(ensure_base_image())
    except DockerUnavailable as exc:
        print(f"isolation.images: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
