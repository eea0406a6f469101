"""Task folders: ``task=NAME`` (bundled, ``tasks/NAME/task.yaml``) or ``task=PATH`` (any folder
holding ``task.yaml``), both composed by Hydra under the same ``/schema/task`` validation.

A task folder's ``task.yaml`` is plain YAML (no Hydra defaults list, nothing of swarmlab). Before
Hydra composes, each folder asked for is read here and stored in Hydra's ConfigStore as an option
of the ``task`` group, with the schema as its defaults list and ``root`` set to the folder's
absolute path; a ``task=PATH`` override is rewritten to name that option. Hydra then validates
the option like any config file: an unknown key or a wrong type is refused with its own message.

The task's own code (its hidden-input generator) is loaded from the folder's file by path, never
imported as a module of swarmlab and never through ``sys.path`` (see :func:`load_task_callable`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tasks.schema import PROJECT_ROOT

TASK_FILE = "task.yaml"
BUNDLED_DIR = PROJECT_ROOT / "tasks"
GROUP = "task"
# Folders registered by task=PATH in this process, for processes that compose again from the same
# overrides (a launcher's job, a child process): os.pathsep-separated absolute paths.
ENV_FOLDERS = "SWARMLAB_TASK_FOLDERS"
_SCHEMA_DEFAULTS = ["/schema/task@_here_", "_self_"]
# The ConfigStore group holding each task kind's node (``TaskKind.task_node``, stored by
# ``judge.config.register_configs``): a folder is composed under its kind's.
KIND_SCHEMA_GROUP = "schema/kind"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Hydra's sweep syntax in a task= value: left to Hydra untouched (only bundled names fit there).
_SWEEP_FUNCTION = re.compile(r"^\s*(choice|range|glob|interval|tag|shuffle|sort)\s*\(")


class TaskFolderError(ValueError):
    """A task folder that cannot be used; the message is one line naming the file and the fix."""


def bundled_task_names() -> list[str]:
    """Every bundled task: a folder of ``tasks/`` holding ``task.yaml``."""
    if not BUNDLED_DIR.is_dir():
        return []
    return sorted(d.name for d in BUNDLED_DIR.iterdir() if (d / TASK_FILE).is_file())


def _where_to_look() -> str:
    names = ", ".join(bundled_task_names()) or "none"
    return f"task=NAME names a bundled task ({names}); task=PATH names a folder holding {TASK_FILE}"


def read_task_yaml(folder: Path) -> dict[str, Any]:
    """The fields of ``folder/task.yaml``, with ``root`` set to the folder's absolute path.

    Raises:
        TaskFolderError: no such folder, no ``task.yaml`` in it, or a file that is not a YAML
            mapping of task fields.
    """
    folder = folder.expanduser().absolute()
    file = folder / TASK_FILE
    if not folder.is_dir():
        raise TaskFolderError(f"task folder {folder} does not exist: {_where_to_look()}")
    if not file.is_file():
        raise TaskFolderError(
            f"{folder} holds no {TASK_FILE}: a task folder needs one (docs/tasks.md describes "
            "its fields; `python -m judge new-task DIR` writes a working one)"
        )
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TaskFolderError(f"{file}: not valid YAML{at} ({problem}): fix the file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFolderError(f"{file}: cannot be read ({exc})") from None
    if not isinstance(data, dict):
        raise TaskFolderError(
            f"{file}: must be a mapping of task fields (name: ..., kind: ...), "
            f"not {type(data).__name__}"
        )
    for key, why in (
        ("defaults", "swarmlab applies the task schema itself"),
        ("root", "the task's root is the folder holding the file"),
    ):
        if key in data:
            raise TaskFolderError(f"{file}: remove `{key}:` ({why})")
    data["root"] = str(folder.resolve())
    return data


def option_name(folder: Path) -> str:
    """The ``task`` group option a folder given by path is stored as: its name plus a hash of
    its absolute path (two folders of the same name never meet)."""
    resolved = folder.expanduser().absolute().resolve()
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", resolved.name) or "task"
    return f"{base}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}"


def register_task_folder(folder: Path, name: str | None = None) -> str:
    """Store ``folder``'s task.yaml as an option of Hydra's ``task`` group.

    Args:
        folder: A folder holding ``task.yaml``.
        name: The option's name (bundled tasks: theirs); default :func:`option_name`.

    Returns:
        The option's name, for a ``task=`` override.

    Raises:
        TaskFolderError: see :func:`read_task_yaml`.
    """
    from hydra.core.config_store import ConfigStore

    data = read_task_yaml(folder)
    option = name or option_name(folder)
    _FILES[option] = Path(data["root"]) / TASK_FILE
    ConfigStore.instance().store(
        group=GROUP,
        name=option,
        node={"defaults": _schema_defaults(data, _FILES[option]), **data},
        provider="swarmlab.tasks",
    )
    return option


def _schema_defaults(data: dict[str, Any], file: Path) -> list[str]:
    """The defaults list a folder's task is composed with: its kind's node (the fields every
    kind has, where no kind's node is stored yet).

    Raises:
        TaskFolderError: the file names no kind, or one that has no node.
    """
    kinds = _options(KIND_SCHEMA_GROUP)
    if not kinds:
        return list(_SCHEMA_DEFAULTS)
    kind = data.get("kind")
    if kind is None:
        raise TaskFolderError(f"{file}: required field(s) missing: kind: add them (docs/tasks.md)")
    if str(kind) not in kinds:
        raise TaskFolderError(
            f"{file}: kind={kind!r} is no task kind: use one of {', '.join(sorted(kinds))}"
        )
    return [f"/{KIND_SCHEMA_GROUP}/{kind}@_here_", "_self_"]


def _options(group: str) -> list[str]:
    """The names of the options stored in ConfigStore ``group`` (none for an unknown group)."""
    from hydra.core.config_store import ConfigStore

    try:
        listed = ConfigStore.instance().list(group)
    except OSError:  # ConfigStore.list raises IOError for an unknown group
        return []
    return [name.removesuffix(".yaml") for name in listed if name.endswith(".yaml")]


# Each registered option's task.yaml, so that Hydra's messages about an option can name the file.
_FILES: dict[str, Path] = {}


def name_task_files(message: str) -> str:
    """``message`` (Hydra's, naming config options as ``task/OPTION``) with each registered
    task option followed by the task.yaml it was read from."""
    for option, file in _FILES.items():
        message = message.replace(f"'task/{option}'", f"'task/{option}' ({file})")
    return message


def register_task_folders() -> None:
    """Store every bundled task, and every folder a ``task=PATH`` of this or a parent process
    registered (``SWARMLAB_TASK_FOLDERS``), in Hydra's ConfigStore (idempotent).

    A folder that cannot be read is skipped here: asking for it by ``task=`` reports why.
    """
    for name in bundled_task_names():
        with contextlib.suppress(TaskFolderError):
            register_task_folder(BUNDLED_DIR / name, name)
    for path in filter(None, os.environ.get(ENV_FOLDERS, "").split(os.pathsep)):
        with contextlib.suppress(TaskFolderError):
            register_task_folder(Path(path))


def _registered(option: str) -> bool:
    from hydra.core.config_store import ConfigStore

    try:
        return f"{option}.yaml" in ConfigStore.instance().list(GROUP)
    except OSError:  # ConfigStore.list raises IOError for an unknown group
        return False


def _looks_like_path(value: str) -> bool:
    return value.startswith((".", "~", "/")) or "/" in value or os.sep in value


def resolve_task_value(value: str) -> str:
    """The ``task`` group option for one ``task=`` value (a bundled name or a folder's path);
    the folder is registered on the way.

    Raises:
        TaskFolderError: neither a bundled task nor a task folder, or a folder that cannot be
            read.
    """
    if len(value) > 1 and value[0] in "'\"" and value[-1] == value[0]:
        value = value[1:-1]
    if value in bundled_task_names():
        return register_task_folder(BUNDLED_DIR / value, value)  # its own errors, if any
    folder = Path(value).expanduser()
    if _looks_like_path(value) or folder.is_dir():
        option = register_task_folder(folder)
        _remember(folder.absolute().resolve())
        return option
    if _registered(value):
        return value  # an option registered earlier (a launcher's job composing again)
    raise TaskFolderError(
        f"task={value}: no bundled task of that name and no folder {folder.absolute()}: "
        f"{_where_to_look()}"
    )


def _remember(folder: Path) -> None:
    known = [p for p in os.environ.get(ENV_FOLDERS, "").split(os.pathsep) if p]
    if str(folder) not in known:
        os.environ[ENV_FOLDERS] = os.pathsep.join([*known, str(folder)])


def resolve_task_overrides(overrides: list[str]) -> list[str]:
    """``overrides`` with every ``task=`` value (a comma-separated sweep too) turned into a
    ``task`` group option, each folder registered in Hydra's ConfigStore.

    A value in Hydra's sweep functions (``choice(...)``, ``glob(...)``) is left to Hydra.

    Raises:
        TaskFolderError: a value that names no task (one line naming the folder and the fix).
    """
    register_task_folders()
    out = []
    for item in overrides:
        key, eq, value = item.partition("=")
        if not eq or key.lstrip("+~") != GROUP or _SWEEP_FUNCTION.match(value):
            out.append(item)
            continue
        options = [resolve_task_value(v.strip()) for v in value.split(",")]
        out.append(f"{key}={','.join(options)}")
    return out


# --- the task's own code, loaded from its folder --------------------------------------------

_LOADED: dict[tuple[str, int], Any] = {}


def load_task_callable(spec: str, root: Path) -> Callable:
    """The function ``spec`` names in a file of the task folder: ``"inputs.py:make_prompts"``.

    The file is loaded by path under a module name of its own (the task folder is never put on
    ``sys.path`` and nothing of it is imported by name), so it works the same in
    ``python -m judge`` and in the judge service, whatever ``PYTHONPATH`` says. A changed file is
    loaded afresh.

    Raises:
        TaskFolderError: a spec not of the form ``FILE.py:FUNCTION``, a missing file or function,
            or a file that fails to load.
    """
    file_part, colon, name = spec.partition(":")
    task_file = root / TASK_FILE
    if not colon or not file_part.endswith(".py") or not name.isidentifier():
        raise TaskFolderError(
            f"{task_file}: inputs={spec!r}: name a Python file of the task folder and its "
            'function, e.g. inputs: "inputs.py:make_prompts"'
        )
    path = (root / file_part).resolve()
    if not path.is_file():
        raise TaskFolderError(f"{task_file}: inputs={spec!r}: no file {path}")
    key = (str(path), path.stat().st_mtime_ns)
    module = _LOADED.get(key)
    if module is None:
        module_name = f"_swarmlab_task_{hashlib.sha256(key[0].encode()).hexdigest()[:12]}"
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise TaskFolderError(f"{path}: cannot be loaded as Python")
        module = importlib.util.module_from_spec(loader_spec)
        # Registered under its own name while it runs: dataclasses and pickling look it up.
        sys.modules[module_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:  # the task's code: any failure is the task's to fix
            sys.modules.pop(module_name, None)
            raise TaskFolderError(
                f"{path}: failed to load ({type(exc).__name__}: {' '.join(str(exc).split())}):"
                " fix the file"
            ) from None
        _LOADED[key] = module
    function = getattr(module, name, None)
    if not callable(function):
        raise TaskFolderError(f"{task_file}: inputs={spec!r}: {path.name} has no function {name}")
    return function


def task_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a task (it names the judge's folder), or None."""
    if not _NAME.match(str(name)):
        return f"name={name!r}: use letters, digits, '_', '.', '-' (it names the judge's folder)"
    return None
