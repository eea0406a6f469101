"""The vendors' coding-agent CLIs that can sit in a seat, one module each, registered by name.

- :mod:`agents.clis.base`: :class:`Client`, the shared machinery (install cache, mounts, key,
  environment) and the protocol a CLI module fills in (command, resume, retry parsing,
  session-record reader, the vendor API it speaks).
- :mod:`agents.clis.registry`: :func:`get_cli`, :func:`register_cli`, :func:`cli_names`.
- ``claude_code``, ``codex``, ``gemini``, ``mini_swe``: the bundled CLIs.

``python -m agents.clients install|check`` installs and checks them (``make clients``).
"""

from __future__ import annotations

from agents.clis.base import Client, ClientMissing, KeyMissing
from agents.clis.registry import (
    CLI_FILES,
    cli_names,
    files_for_cli,
    get_cli,
    register_cli,
    unregister_cli,
)

__all__ = [
    "CLI_FILES",
    "Client",
    "ClientMissing",
    "KeyMissing",
    "cli_names",
    "files_for_cli",
    "get_cli",
    "register_cli",
    "unregister_cli",
]
