"""The agent CLIs from the command line, and the names callers have always imported.

    python -m agents.clients install [NAME ...]   # pinned versions, into the cache
    python -m agents.clients check [NAME ...]     # installed? prints each binary, exit 1 if not

Each CLI is one module of :mod:`agents.clis`, registered by name (:func:`get_client`); the
install, mount, key and environment machinery they share is :mod:`agents.clis.base`.

**Install.** Each npm CLI is installed on the host with ``npm`` (exact pinned version, no
install scripts run) into ``results/.cache/clients/<name>-<version>/`` (``SWARMLAB_CLIENTS_DIR``
overrides the cache root). Claude Code and Codex ship a self-contained native binary in a
per-platform optional dependency, so neither needs Node inside the container; the Gemini CLI
runs on the host's ``/usr/bin/node``, seen through the container's read-only ``/usr`` mount.
That folder is mounted **read-only** at ``/opt/swarmlab/clients/<name>`` in the agent's
container. A mount rather than an image layer: the binaries are ~400 MB each, a layer would
copy them into the engine's storage once more per version, and after the first install nothing
needs the network. A missing CLI raises :class:`ClientMissing`, whose one-line message names
the install command. mini-swe-agent is a PyPI package: pip into a virtual environment of its
own, made with the runner's Python.

**Keys.** The key and the base URL come from the host environment by *name* (``key_env``,
``base_url_env``); :meth:`Client.env` puts their values in the container's environment only,
and :meth:`Client.check_key` fails with one line before any container starts.

**Invocation.** No seat gets web tools: a web search runs at the vendor, outside the seats'
network, and a web fetch from the container reaches nothing (the model proxy refuses
server-side tools too). In the agent container ``HOME`` is ``/work/notes`` (the contract), so
every CLI's session record lands in the agent's notes folder on the host, where
``analysis.tokens.read_usage(client.record_dir(notes), client.record_format)`` reads it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping

from agents.clis import Client, ClientMissing, KeyMissing, cli_names, get_cli
from agents.clis.base import (
    CONTAINER_PATH,
    CONTAINER_ROOT,
    DEFAULT_CACHE,
    PROJECT_ROOT,
    STAMP,
    cache_root,
)

__all__ = [
    "CONTAINER_PATH",
    "CONTAINER_ROOT",
    "DEFAULT_CACHE",
    "PROJECT_ROOT",
    "STAMP",
    "Client",
    "ClientMissing",
    "KeyMissing",
    "cache_root",
    "client_names",
    "get_client",
    "main",
    "model_network",
]


def get_client(name: str) -> Client:
    """The CLI registered as ``name`` (:func:`agents.clis.get_cli`).

    Raises:
        ValueError: no such CLI.
    """
    return get_cli(name)


def client_names() -> list[str]:
    """Every CLI's name, bundled ones first."""
    return cli_names()


# -- a network that reaches only the model endpoint -----------------------------------------


def model_network(
    client,
    name: str = "swarmlab-model",
    *,
    isolated: bool = False,
    labels: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """An internal Docker network (``docker network create --internal``) and its gateway
    address: a container on it reaches the host at that address (where a model endpoint or the
    model proxy listens) and nothing outside. ``isolated``: containers on it cannot reach each
    other either (``com.docker.network.bridge.enable_icc=false``), so seats talk only through
    the gateway's services. Created when missing; (name, gateway)."""
    import docker

    try:
        network = client.networks.get(name)
    except docker.errors.NotFound:
        options = {"com.docker.network.bridge.enable_icc": "false"} if isolated else None
        network = client.networks.create(
            name, driver="bridge", internal=True, options=options, labels=dict(labels or {})
        )
        network.reload()
    if not network.attrs.get("Internal"):
        raise RuntimeError(f"docker network {name} exists and is not internal")
    icc = (network.attrs.get("Options") or {}).get("com.docker.network.bridge.enable_icc")
    if isolated and icc != "false":
        raise RuntimeError(f"docker network {name} exists and lets containers reach each other")
    configs = (network.attrs.get("IPAM") or {}).get("Config") or []
    gateway = next((c.get("Gateway") for c in configs if c.get("Gateway")), None)
    if not gateway:
        raise RuntimeError(f"docker network {name} has no gateway address")
    return name, gateway


# -- command line ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``install`` or ``check`` the named CLIs (default: every registered one); 1 if any is
    missing, 2 for an unknown name."""
    parser = argparse.ArgumentParser(prog="python -m agents.clients", description=__doc__)
    parser.add_argument("action", choices=("install", "check"))
    parser.add_argument("names", nargs="*", help=f"default: all ({', '.join(cli_names())})")
    args = parser.parse_args(argv)
    try:
        clients = [get_client(n) for n in args.names or cli_names()]
    except ValueError as exc:
        print(f"agents.clients: {exc}", file=sys.stderr)
        return 2
    failed = 0
    for client in clients:
        try:
            if args.action == "install":
                started = time.monotonic()
                already = client.installed()
                path = client.install()
                how = (
                    "already installed"
                    if already
                    else f"installed in {time.monotonic() - started:.0f} s"
                )
                print(f"{client.name} {client.version}: {how}: {path}")
            else:
                print(f"{client.name} {client.version}: {client.binary()}")
        except ClientMissing as exc:
            print(f"agents.clients: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
