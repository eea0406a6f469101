"""The machinery every agent CLI shares: the install cache, the read-only mount into the
agent's container, the key and base URL by name, and the protocol a CLI module fills in.

A CLI module (``agents/clis/<name>.py``) subclasses :class:`Client` and registers one instance
with :func:`agents.clis.registry.register_cli`. It owns:

- **install**: ``package``/``version`` (npm by default: :meth:`Client.install`; mini-swe-agent
  overrides it with pip into a virtual environment of its own);
- **command** and **resume**: :meth:`Client.command`, :meth:`Client.resume_command`,
  :attr:`Client.resume_mechanism`, :attr:`Client.resumes_session`;
- **retry parsing**: :meth:`Client.count_retries` over one start's output;
- **session-record reader**: :meth:`Client.claims_document` / :meth:`Client.claims_line` (format
  detection) and :meth:`Client.read_records` (token usage, with the record's de-duplication
  rules), :attr:`Client.cost_source`;
- **the vendor API it speaks**, by name (``api``: an ``agents.apis`` name, whose module owns the
  routes, the auth header, the server-side tools and the wire usage the model proxy uses).

The record format of a CLI is its name (``AgentSpec.records_format``).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.usage import UsageByModel

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_CACHE = PROJECT_ROOT / "results" / ".cache" / "clients"
CONTAINER_ROOT = "/opt/swarmlab/clients"
STAMP = ".swarmlab-installed"
# The container's PATH (isolation.backends.docker_env sets it; a command may prepend to it).
CONTAINER_PATH = "/opt/swarmlab/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


_TRIPLES = {"x64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


class ClientMissing(RuntimeError):
    """A CLI is not installed in the cache (the message names the install command)."""


class KeyMissing(RuntimeError):
    """The host environment lacks the variable holding a CLI's key."""


def cache_root() -> Path:
    return Path(os.environ.get("SWARMLAB_CLIENTS_DIR") or DEFAULT_CACHE)


def _arch() -> str:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "x64"
    if machine in ("aarch64", "arm64"):
        return "arm64"
    raise RuntimeError(f"no agent CLI builds for this machine ({machine}): x86_64 or arm64 only")


@dataclass(frozen=True)
class Client:
    """One vendor CLI.

    Attributes:
        name: the seat's ``agent=`` value.
        package: the npm package, installed at exactly ``version``.
        binary_path: the native binary's path inside the install folder (``{arch}``: x64 or
            arm64, ``{triple}``: the Rust target triple).
        key_env, base_url_env: host variables (by name) holding the key and the base URL.
        default_base_url: the vendor's API when ``base_url_env`` is unset.
        default_model: the model when the seat names none.
        records: the session records' folder, relative to ``HOME``.
        path_dirs: folders inside the install (templates as ``binary_path``) put in front of
            ``PATH`` (Codex's ``rg``).
        fixed_env: variables every invocation gets.
        interpreter: the program that runs ``binary_path`` when it is a script (Gemini CLI:
            the host's ``/usr/bin/node``, seen in the container through the ``/usr`` mount).
        settings_dir: a folder of this repository mounted read-only at :attr:`settings_mount`
            (the CLI's fixed settings: no telemetry, no update checks).
        api: the API the CLI speaks, whose model routes alone the model proxy forwards
            (the vendor API registry).
    """

    name: str
    package: str
    version: str
    binary_path: str
    key_env: str
    base_url_env: str
    default_base_url: str
    default_model: str
    records: str
    path_dirs: tuple[str, ...] = ()
    fixed_env: Mapping[str, str] = field(default_factory=dict)
    interpreter: str = ""
    settings_dir: str = ""
    api: str = "openai"

    # -- install -------------------------------------------------------------------------

    @staticmethod
    def _resolve(template: str) -> str:
        arch = _arch()
        return template.format(arch=arch, triple=_TRIPLES[arch])

    @property
    def install_note(self) -> str:
        """How the install gets the client, for the "not installed" message."""
        return "npm, ~400 MB, needs the npm registry once"

    @property
    def relative_binary(self) -> str:
        return self._resolve(self.binary_path)

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"

    def install_dir(self, root: Path | None = None) -> Path:
        return (root or cache_root()) / f"{self.name}-{self.version}"

    @property
    def install_command(self) -> str:
        return f".venv/bin/python -m agents.clients install {self.name}"

    def binary(self, root: Path | None = None) -> Path:
        """The installed native binary on the host.

        Raises:
            ClientMissing: not installed (or half installed); the message says how to install.
        """
        folder = self.install_dir(root)
        path = folder / self.relative_binary
        if not (folder / STAMP).is_file() or not os.access(path, os.X_OK):
            raise ClientMissing(
                f"{self.name} ({self.spec}) is not installed in {folder}: run"
                f" `{self.install_command}` ({self.install_note})"
            )
        return path

    def installed(self, root: Path | None = None) -> bool:
        try:
            self.binary(root)
        except ClientMissing:
            return False
        return True

    def install(self, root: Path | None = None, npm: str = "npm", timeout: float = 900) -> Path:
        """Install the pinned package with npm (no-op when already there); the binary's path.

        npm runs into a temporary folder beside the final one, which is renamed into place
        once the binary is found: an interrupted install never looks installed.
        """
        if self.installed(root):
            return self.binary(root)
        if shutil.which(npm) is None:
            raise ClientMissing(f"installing {self.spec} needs npm (Node.js) on this host's PATH")
        final = self.install_dir(root)
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            done = subprocess.run(
                [
                    npm,
                    "install",
                    "--prefix",
                    str(work),
                    "--no-save",
                    "--no-audit",
                    "--no-fund",
                    "--ignore-scripts",  # the binaries are used in place: no vendor code runs
                    "--include=optional",  # the native binaries are optional dependencies
                    "--loglevel=error",
                    self.spec,
                ],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=work,
            )
            if done.returncode != 0:
                raise ClientMissing(
                    f"npm install {self.spec} failed ({done.returncode}):"
                    f" {(done.stderr or done.stdout).strip()[-2000:]}"
                )
            binary = work / self.relative_binary
            if not os.access(binary, os.X_OK):
                raise ClientMissing(
                    f"npm installed {self.spec} but not its native binary"
                    f" {binary.relative_to(work)} (an optional dependency: is npm set to omit"
                    " optional packages?)"
                )
            os.chmod(work, 0o755)  # mkdtemp's 0700 would hide it from the agent's uid
            (work / STAMP).write_text(f"{self.spec}\n{time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
        return self.binary(root)

    # -- in the container ----------------------------------------------------------------

    @property
    def container_dir(self) -> str:
        return f"{CONTAINER_ROOT}/{self.name}"

    @property
    def container_binary(self) -> str:
        return f"{self.container_dir}/{self.relative_binary}"

    def mounts(self, root: Path | None = None) -> dict[str, str]:
        """``AgentSpec.extra_mounts`` (read-only): the install folder at :attr:`container_dir`.

        Raises:
            ClientMissing: not installed.
        """
        self.binary(root)
        mounts = {str(self.install_dir(root)): self.container_dir}
        if self.settings_dir:
            mounts[str(PROJECT_ROOT / self.settings_dir)] = self.settings_mount
        return mounts

    @property
    def settings_mount(self) -> str:
        """Where :attr:`settings_dir` is in the container."""
        return f"{self.container_dir}-settings"

    def check_key(self, environ: Mapping[str, str] | None = None) -> None:
        """Raises :class:`KeyMissing` (one line) when the host has no key for this CLI."""
        environ = os.environ if environ is None else environ
        if not environ.get(self.key_env):
            raise KeyMissing(
                f"agent={self.name} needs {self.key_env} in the environment (and optionally"
                f" {self.base_url_env}, default {self.default_base_url})"
            )

    def base_url(self, environ: Mapping[str, str] | None = None) -> str:
        environ = os.environ if environ is None else environ
        return (environ.get(self.base_url_env) or self.default_base_url).rstrip("/")

    def env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The container's environment for this CLI: the key and base URL read from
        ``environ`` (the host's) by name, and the fixed settings. Pass it to the container
        only: it holds the key, so it must never be written into a run's results.

        Raises:
            KeyMissing: no key in ``environ``.
        """
        environ = os.environ if environ is None else environ
        self.check_key(environ)
        return {
            **self.fixed_env,
            self.key_env: environ[self.key_env],
            self.base_url_env: self.base_url(environ),
        }

    # -- the protocol a CLI module fills in ----------------------------------------------

    @property
    def record_format(self) -> str:
        """The ``analysis.tokens`` format of this CLI's records: its name."""
        return self.name

    def command(
        self,
        prompt: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The headless invocation in the container (argv; no secret in it)."""
        raise NotImplementedError(f"{self.name}: no command")

    def resume_command(
        self,
        message: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The headless invocation that continues the most recent session recorded under
        ``HOME`` for the container's working directory, ``message`` as the next user turn."""
        raise NotImplementedError(f"{self.name}: no resume command")

    @property
    def resumes_session(self) -> bool:
        """True when :meth:`resume_command` continues the recorded session; False for a CLI
        without session resume (mini-swe-agent), whose restart is a fresh session: the runner
        then gives it the seat's prompt followed by the keep-going message."""
        return True

    @property
    def resume_mechanism(self) -> str:
        """How :meth:`resume_command` continues a session, in the CLI's own words."""
        return "fresh start"

    def count_retries(self, output: str) -> dict[str, Any]:
        """The API retries the CLI reported in one start's output: ``count``, ``statuses``
        (status: count) and, where the CLI announces its delays, ``waited_s``."""
        del output
        return {"count": 0, "statuses": {}}

    def claims_document(self, obj: Any) -> bool:
        """True when a record file that is one JSON document ``obj`` is this CLI's."""
        del obj
        return False

    def claims_line(self, obj: Any) -> bool:
        """True when one JSON line ``obj`` of a record file says the file is this CLI's."""
        del obj
        return False

    def read_records(self, paths: list[Path]) -> UsageByModel:
        """The token usage in these record files (all this CLI's), per model, each API call
        counted once across the files."""
        raise NotImplementedError(f"{self.name}: no session-record reader")

    @property
    def cost_source(self) -> str | None:
        """Where the cost estimate in this CLI's records comes from (None: it writes none)."""
        return None

    def spec_fields(
        self,
        prompt: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
        root: Path | None = None,
    ) -> dict[str, object]:
        """``AgentSpec`` keyword arguments for a seat of this CLI: the offline base image (the
        host's ``/usr`` gives the dynamic loader Claude Code's binary needs), the command, the
        environment (holding the key: never write it out) and the read-only install mount.
        The caller adds ``network`` (see :func:`model_network`) and the rest.

        Raises:
            ClientMissing: not installed. KeyMissing: no key in ``environ``.
        """
        from isolation.images import base_tag

        return {
            "image": base_tag(),
            "command": self.command(prompt, model, environ),
            "env": self.env(environ),
            "extra_mounts": self.mounts(root),
            "memory": "2g",
        }

    def record_dir(self, home: Path) -> Path:
        """Where the session records lie under ``home`` (the agent's notes folder)."""
        return Path(home) / self.records
