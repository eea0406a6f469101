"""Offline container images: an empty root that borrows the host's /usr and Python read-only.

No registry is needed. The base image is a tiny tarball (top-level folders, the merged-/usr
links, a minimal passwd/group) imported into the local engine; containers made from it mount
the host's ``/usr`` and the current interpreter's installation read-only at the same paths (see
:func:`host_python_mounts`), so ``sys.executable`` and the project's dependencies work inside.

``python -m isolation.images`` builds the base image and prints its id. Every container of
swarmlab starts through :func:`run_container`, which never pulls: a missing base image is made
here (one progress line on stderr), any other missing image is :class:`ImageMissing`, one line
naming what to run. ``SWARMLAB_BASE_IMAGE`` names the base image's tag (default
``swarmlab-base:1``; the configs read the same variable), so tests can use a throwaway one.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
import tarfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

DEFAULT_BASE_TAG = "swarmlab-base:1"
BASE_IMAGE_ENV = "SWARMLAB_BASE_IMAGE"


def base_tag() -> str:
    """The base image's tag: ``$SWARMLAB_BASE_IMAGE``, else ``swarmlab-base:1``."""
    return os.environ.get(BASE_IMAGE_ENV, "").strip() or DEFAULT_BASE_TAG


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
    """No Docker engine answers (or the docker client cannot reach it). The message is one
    line naming the fix; every command a user types prints it and exits 2."""


class ImageMissing(RuntimeError):
    """An image that swarmlab cannot make itself is not in the local engine (nothing is ever
    pulled). The message is one line naming what to run; every command prints it, exit 2."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def docker_client() -> docker.DockerClient:
    """A client for the local engine, or :class:`DockerUnavailable` saying how to start one."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise DockerUnavailable(
            f"No Docker engine answers ({_one_line(exc)}). Start one with `make setup` or, as "
            "root, `bash scripts/docker-engine.sh ensure`; see README.md, 'Docker engine'."
        ) from exc
    return client


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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


def ensure_base_image(
    client: docker.DockerClient | None = None, tag: str | None = None, progress=_progress
) -> str:
    """Import the base image under ``tag`` (default :func:`base_tag`) unless it is already
    there with the same content, saying so in one ``progress`` line when it makes it.

    Works offline. Returns the image id.
    """
    import docker

    client = client or docker_client()
    tag = tag or base_tag()
    data = base_rootfs_tar()
    digest = hashlib.sha256(data + "\n".join(_CHANGES).encode()).hexdigest()
    try:
        image = client.images.get(tag)
        if (image.labels or {}).get(CONTENT_LABEL) == digest:
            return image.id
    except docker.errors.ImageNotFound:
        pass
    progress(f"making the base image {tag} (offline, from an empty root; once)")
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


def ensure_image(client: docker.DockerClient, tag: str, progress=_progress) -> str:
    """The id of image ``tag`` in the local engine, never pulled: the base image is made when
    missing (:func:`ensure_base_image`); any other missing image is :class:`ImageMissing`.

    A task's ``image/Dockerfile`` image is built by :func:`isolation.taskenv.task_image`
    (which makes the base image first); here it is only looked up.
    """
    import docker

    if tag == base_tag():
        return ensure_base_image(client, tag, progress)
    try:
        return client.images.get(tag).id
    except docker.errors.ImageNotFound:
        raise ImageMissing(_image_missing(tag)) from None


def _image_missing(tag: str) -> str:
    if tag.startswith("swarmlab-task-"):
        return (
            f"image {tag} (a task's image/Dockerfile) is not in the local Docker engine and"
            " nothing is pulled: run `python -m judge setup task=TASK` again to build it"
        )
    return (
        f"image {tag} is not in the local Docker engine and nothing is pulled: build or load"
        f" it (`docker build -t {tag} DIR` or `docker load -i FILE`), or use the base image"
        f" {base_tag()}, which swarmlab makes itself (`python -m isolation.images`)"
    )


def run_container(client: docker.DockerClient, image: str, command=None, **options):
    """Start a detached container of ``image`` (docker-py ``containers.run`` keywords), the
    one way swarmlab starts containers: unlike ``containers.run`` it never pulls. A missing
    base image is made (one progress line); any other missing image is :class:`ImageMissing`.
    """
    import docker

    options.pop("detach", None)  # always detached: the caller holds the container
    try:
        container = client.containers.create(image, command, **options)
    except docker.errors.ImageNotFound:
        ensure_image(client, image)  # the base image: made now; anything else: ImageMissing
        container = client.containers.create(image, command, **options)
    try:
        container.start()
    except BaseException:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        raise
    return container


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
    except (DockerUnavailable, RuntimeError) as exc:
        print(f"isolation.images: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
