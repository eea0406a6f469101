"""The agent CLIs by name: the bundled ones (imported on first use) and any registered since.

A CLI is one module, ``agents/clis/<name>.py``, that calls :func:`register_cli` with an
instance of its :class:`~agents.clis.base.Client` subclass, and one Hydra group file,
``conf/agent/<name>.yaml`` (``client: <name>``), plus its tests: :data:`CLI_FILES`. Nothing else
of swarmlab changes for a new CLI on an API the model proxy already knows.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents.clis.base import Client

__all__ = ["CLI_FILES", "cli_names", "files_for_cli", "get_cli", "register_cli", "unregister_cli"]

# The bundled CLIs, imported when first asked for (no CLI's code runs at ``import agents``).
_BUNDLED = {
    "claude_code": "agents.clis.claude_code",
    "codex": "agents.clis.codex",
    "gemini": "agents.clis.gemini",
    "mini_swe": "agents.clis.mini_swe",
}
_CLIS: dict[str, Client] = {}
# The project files one CLI needs besides its tests (relative to the project root).
CLI_FILES = ("agents/clis/{name}.py", "conf/agent/{name}.yaml")


def register_cli(cli: Client) -> Client:
    """Register ``cli`` under its name; returns it.

    Raises:
        ValueError: another CLI already has that name.
    """
    old = _CLIS.get(cli.name)
    if old is not None and old != cli:
        raise ValueError(f"agent CLI {cli.name!r} is already registered")
    _CLIS[cli.name] = cli
    return cli


def unregister_cli(name: str) -> None:
    """Forget a CLI registered at run time (a test's); bundled ones come back on next use."""
    _CLIS.pop(name, None)


def cli_names() -> list[str]:
    """Every CLI that can be asked for by name, bundled ones first."""
    return [*_BUNDLED, *sorted(set(_CLIS) - set(_BUNDLED))]


def get_cli(name: str) -> Client:
    """The CLI registered as ``name``.

    Raises:
        ValueError: no such CLI (the message lists the known ones).
    """
    if name not in _CLIS and name in _BUNDLED:
        importlib.import_module(_BUNDLED[name])
    try:
        return _CLIS[name]
    except KeyError:
        raise ValueError(f"no agent CLI named {name!r}; known: {', '.join(cli_names())}") from None


def files_for_cli(name: str) -> list[str]:
    """The project files a CLI named ``name`` needs (:data:`CLI_FILES`), its tests aside."""
    return [template.format(name=name) for template in CLI_FILES]
