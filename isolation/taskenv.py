"""What a task brings to every container that runs its code: the image, the assets, and the
one writable, executable build folder.

The judge's sandbox containers and the arm's agent containers get the same: the task's image
(``task.image``, or one built from the task's ``image/Dockerfile`` ``FROM`` the offline base
image), its assets read-only at ``/assets/<name>`` (``$SWARMLAB_ASSETS``), and a build folder at
``/build`` (``$SWARMLAB_BUILD``, ``{build}`` in a task's argv) that is a tmpfs of the container:
empty at start, gone with the container, never the candidate's tree.

Assets are hashed (sha256) into the task's fingerprint; the hashes are cached by path, size and
modification time, so a large file is read once, not on every start.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ASSETS_DIR",
    "BUILD_DIR",
    "TaskEnvironmentError",
    "TaskRuntime",
    "asset_digests",
    "asset_paths",
    "task_image",
    "task_runtime",
    "toolchain_outputs",
]

BUILD_DIR = "/build"
ASSETS_DIR = "/assets"
TASK_IMAGE_DIR = "image"
TASK_IMAGE_LABEL = "org.swarmlab.task.image-sha256"
_ASSET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TAG_OK = re.compile(r"[^a-z0-9_.-]")
_HASH_CHUNK = 1 << 20


class TaskEnvironmentError(ValueError):
    """A task's assets or image cannot be used; the message is one line naming the file and
    the fix (``python -m judge`` exits 2 on it)."""


@dataclass(frozen=True)
class TaskRuntime:
    """The task's part of a container: its image (None: the caller's default) and its assets
    (name -> absolute host path)."""

    image: str | None = None
    image_id: str | None = None
    assets: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """The variables naming the build folder and the assets' folder."""
        return {"SWARMLAB_BUILD": BUILD_DIR, "SWARMLAB_ASSETS": ASSETS_DIR}

    def volumes(self) -> dict[str, dict[str, str]]:
        """docker-py ``volumes``: every asset read-only at ``/assets/<name>``."""
        return {
            host: {"bind": f"{ASSETS_DIR}/{name}", "mode": "ro"}
            for name, host in sorted(self.assets.items())
        }


def _field(task: Any, name: str, default: Any = None) -> Any:
    getter = getattr(task, "get", None)
    return getter(name, default) if callable(getter) else getattr(task, name, default)


def asset_paths(task: Any, root: Path) -> dict[str, str]:
    """``task.assets`` as absolute host paths (relative ones are taken from the task folder).

    Raises:
        TaskEnvironmentError: a name that is not a plain file name, or a path that does not
            exist.
    """
    assets = _field(task, "assets") or {}
    out: dict[str, str] = {}
    for name, given in dict(assets).items():
        if not _ASSET_NAME.match(str(name)):
            raise TaskEnvironmentError(
                f"{root / 'task.yaml'}: asset name {name!r} is not a plain name"
                " (letters, digits, '_', '.', '-'): rename it in task.yaml's assets"
            )
        path = Path(str(given)).expanduser()
        path = path if path.is_absolute() else root / path
        if not path.exists():
            raise TaskEnvironmentError(
                f"{root / 'task.yaml'}: asset {name} ({path}) does not exist:"
                " put the file there or fix task.yaml's assets"
            )
        out[str(name)] = str(path.resolve())
    return out


def _file_digest(path: Path, cache: dict[str, Any]) -> str:
    st = path.stat()
    key = str(path)
    known = cache.get(key)
    stamp = [st.st_size, st.st_mtime_ns]
    if isinstance(known, dict) and known.get("stamp") == stamp:
        return str(known["sha256"])
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    cache[key] = {"stamp": stamp, "sha256": digest.hexdigest()}
    return digest.hexdigest()


def asset_digests(assets: dict[str, str], cache_file: Path | None = None) -> dict[str, str]:
    """sha256 of each asset (a folder: of its files' relative paths and contents), reusing
    ``cache_file``'s hashes of files whose size and modification time are unchanged."""
    cache: dict[str, Any] = {}
    if cache_file is not None:
        try:
            cache = json.loads(cache_file.read_text())
        except (OSError, ValueError):
            cache = {}
    before = json.dumps(cache, sort_keys=True)
    out: dict[str, str] = {}
    for name, host in sorted(assets.items()):
        path = Path(host)
        if path.is_dir():
            digest = hashlib.sha256()
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                rel = file.relative_to(path).as_posix()
                digest.update(f"{rel}\0{_file_digest(file, cache)}\n".encode())
            out[name] = "dir:" + digest.hexdigest()
        else:
            out[name] = _file_digest(path, cache)
    if cache_file is not None and json.dumps(cache, sort_keys=True) != before:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        staging = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.tmp")
        staging.write_text(json.dumps(cache, sort_keys=True))
        staging.replace(cache_file)  # atomic: two processes never leave half a file
    return out


def _image_folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = file.relative_to(folder).as_posix()
        digest.update(rel.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


# Process-wide: the fingerprint and every sandbox ask for the same image many times.
_IMAGES: dict[tuple[str, ...], tuple[str, str]] = {}
_TOOLCHAIN: dict[tuple[str, ...], list[str]] = {}


def _log_tail(lines: Any, keep: int = 6) -> str:
    texts: list[str] = []
    for entry in lines or []:
        if isinstance(entry, dict):
            text = entry.get("stream") or entry.get("error") or ""
        else:
            text = str(entry)
        texts += [t.strip() for t in str(text).splitlines() if t.strip()]
    return " | ".join(texts[-keep:]) or "no build output"


def task_image(task: Any, root: Path, client: Any = None) -> tuple[str, str] | None:
    """The task's image as (tag, image id), or None when it names none and ships no
    ``image/Dockerfile``.

    ``task.image`` must already exist in the local engine (nothing is pulled). A Dockerfile is
    built offline (no pull, no network) with the build argument ``BASE`` set to the base image,
    which is made first if missing; the tag is derived from a hash of the ``image/`` folder and
    the base image, so an unchanged folder reuses the image (and the layer cache) and a changed
    one builds a new tag.

    Raises:
        TaskEnvironmentError: the named image is missing, or the Dockerfile fails to build
            (the message carries the build log's tail).
    """
    import docker

    from isolation.images import base_tag, docker_client, ensure_base_image

    base = base_tag()
    named = _field(task, "image")
    dockerfile = root / TASK_IMAGE_DIR / "Dockerfile"
    if not named and not dockerfile.is_file():
        return None
    content = "" if named else _image_folder_digest(dockerfile.parent)
    key = (str(named or ""), str(root), content, base)
    if key in _IMAGES:
        return _IMAGES[key]
    client = client or docker_client()
    if named:
        try:
            image = client.images.get(str(named))
        except docker.errors.ImageNotFound:
            raise TaskEnvironmentError(
                f"{root / 'task.yaml'}: image {named} is not in the local Docker engine"
                " (nothing is pulled): build or load it, or drop `image:` to use"
                f" {TASK_IMAGE_DIR}/Dockerfile or the base image"
            ) from None
        _IMAGES[key] = (str(named), image.id)
        return _IMAGES[key]
    base_id = ensure_base_image(client, base)
    digest = hashlib.sha256(f"{content}|{base_id}".encode()).hexdigest()
    name = _TAG_OK.sub("-", str(_field(task, "name", "") or root.name).lower())[:60] or "task"
    tag = f"swarmlab-task-{name}:{digest[:16]}"
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        print(
            f"building the task's image {tag} from {dockerfile} (offline; once per change)",
            file=sys.stderr,
            flush=True,
        )
        try:
            image, _ = client.images.build(
                path=str(dockerfile.parent),
                tag=tag,
                pull=False,
                network_mode="none",
                buildargs={"BASE": base},
                labels={TASK_IMAGE_LABEL: digest},
                rm=True,
                forcerm=True,
            )
        except docker.errors.BuildError as exc:
            raise TaskEnvironmentError(
                f"{dockerfile}: the task's image failed to build ({_log_tail(exc.build_log)}):"
                f" fix the Dockerfile (built offline, FROM ${{BASE}} = {base}, no network)"
            ) from None
        except docker.errors.APIError as exc:
            raise TaskEnvironmentError(
                f"{dockerfile}: the task's image failed to build ({exc.explanation or exc}):"
                f" fix the Dockerfile (built offline, FROM ${{BASE}} = {base}, no network)"
            ) from None
    _IMAGES[key] = (tag, image.id)
    return _IMAGES[key]


def task_runtime(task: Any, root: Path, client: Any = None) -> TaskRuntime:
    """The task's image (built if needed) and assets, checked.

    Raises:
        TaskEnvironmentError: see :func:`asset_paths` and :func:`task_image`.
    """
    assets = asset_paths(task, root)
    image = task_image(task, root, client)
    if image is None:
        return TaskRuntime(assets=assets)
    return TaskRuntime(image=image[0], image_id=image[1], assets=assets)


def toolchain_outputs(
    commands: list[list[str]],
    image: str,
    mount_host_python: bool,
    runtime: TaskRuntime | None = None,
    client: Any = None,
) -> list[str]:
    """What each of ``commands`` prints (stdout and stderr, with its exit code) in a fresh
    container of ``image`` under the sandbox's restrictions, for the task's fingerprint.

    Raises:
        TaskEnvironmentError: a command cannot be started in the image.
    """
    import docker

    from isolation.images import docker_client, host_python_mounts, run_container

    if not commands:
        return []
    key = (image, str(mount_host_python), json.dumps(commands))
    if key in _TOOLCHAIN:
        return _TOOLCHAIN[key]
    client = client or docker_client()
    volumes = dict(host_python_mounts()) if mount_host_python else {}
    if runtime is not None:
        volumes.update(runtime.volumes())
    outputs = []
    for argv in commands:
        argv = [str(a) for a in argv]
        try:
            container = run_container(  # never pulled; a missing base image is made
                client,
                image,
                argv,
                network_mode="none",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                read_only=True,
                tmpfs={"/tmp": "rw,nosuid,nodev,size=64m", BUILD_DIR: "rw,exec,size=64m"},
                user="65534:65534",
                volumes=volumes,
                environment={"TMPDIR": BUILD_DIR, "SWARMLAB_BUILD": BUILD_DIR},
                mem_limit="512m",
            )
        except docker.errors.DockerException as exc:
            raise TaskEnvironmentError(
                f"task.toolchain {argv}: cannot run in image {image} ({exc}):"
                " name a command the image has"
            ) from None
        try:
            code = container.wait(timeout=120).get("StatusCode")
            text = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        finally:
            container.remove(force=True)
        outputs.append(f"{json.dumps(argv)} exit {code}\n{text}")
    _TOOLCHAIN[key] = outputs
    return outputs
