"""The agent CLIs by name: the bundled ones (imported on first use) and any registered since.

A CLI is one module, ``agents/clis/<name>.py``, that calls :func:`register_cli` with an
instance of its :class:`~agents.clis.base.Client` subclass, and one Hydra group file,
``conf/agent/<name>.yaml`` (``client: <name>``), plus its tests: :data:`CLI_FILES`. Nothing else
of swarmlab changes for a new CLI on an API the model proxy already knows: the registry finds the
module by its call of :func:`register_cli` (:class:`registry.Registry`), with no list to edit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from registry import Registry

if TYPE_CHECKING:
    from agents.clis.base import Client

__all__ = ["CLI_FILES", "cli_names", "files_for_cli", "get_cli", "register_cli", "unregister_cli"]

# The bundled CLIs, imported when first asked for (no CLI's code runs at ``import agents``); a
# module registering without a literal name registers its own (``agents/clis/codex.py``: codex).
CLIS: Registry[Client] = Registry(
    "agent CLI", "agents.clis", "register_cli", "swarmlab.agent_clis", bundled_first=True
)
# The project files one CLI needs besides its tests (relative to the project root).
CLI_FILES = ("agents/clis/{name}.py", "conf/agent/{name}.yaml")


def register_cli(cli: Client) -> Client:
    """Register ``cli`` under its name; returns it.

    Raises:
        ValueError: another CLI already has that name.
    """
    return CLIS.register(cli.name, cli, unique=True)


def unregister_cli(name: str) -> None:
    """Forget a CLI registered at run time (a test's); bundled ones come back on next use."""
    CLIS.unregister(name)


def cli_names() -> list[str]:
    """Every CLI that can be asked for by name, bundled ones first."""
    return CLIS.names()


def get_cli(name: str) -> Client:
    """The CLI registered as ``name``.

    Raises:
        ValueError: no such CLI (the message lists the known ones).
    """
    return CLIS.get(name)


def files_for_cli(name: str) -> list[str]:
    """The project files a CLI named ``name`` needs (:data:`CLI_FILES`), its tests aside."""
    return [template.format(name=name) for template in CLI_FILES]
