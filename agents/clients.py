"""The vendors' coding-agent CLIs that can sit in a seat: how each is installed, mounted into
the agent's container, invoked headless, and where it leaves its session record.

    python -m agents.clients install [NAME ...]   # npm, pinned versions, into the cache (~20 s)
    python -m agents.clients check [NAME ...]     # installed? prints each binary, exit 1 if not

**Install.** Each CLI is installed on the host with ``npm`` (exact pinned version, no install
scripts run) into ``results/.cache/clients/<name>-<version>/`` (``SWARMLAB_CLIENTS_DIR``
overrides the cache root). Claude Code and Codex ship a self-contained native binary in a
per-platform optional dependency (Claude Code: a Bun-compiled ELF; Codex: a static musl ELF),
so neither needs Node inside the container. The Gemini CLI is one bundled Node program
(``bundle/gemini.js``, engines ``node >= 20``), run by the host's ``/usr/bin/node``, which the
container sees through its read-only ``/usr`` mount (checked: ``ClientMissing`` names what is
missing). That folder is mounted **read-only** at
``/opt/swarmlab/clients/<name>`` in the agent's container, the way the offline base image
borrows the host's ``/usr``. A mount rather than an image layer: the binaries are ~400 MB
each, a layer would copy them into the engine's storage once more per version, and after the
first install nothing needs the network. A missing CLI raises :class:`ClientMissing`, whose
one-line message names the install command.
mini-swe-agent (``agents/mini_swe.py``, a subclass registered at the end of this module) is a
PyPI package: pip into a virtual environment of its own, made with the runner's Python.

**Keys.** The key and the base URL come from the host environment by *name* (``key_env``,
``base_url_env``); :meth:`Client.env` puts their values in the container's environment only
(never in a file: neither CLI writes them into its home when given this way), and
:meth:`Client.check_key` fails with one line before any container starts.

**Invocation.** No seat gets web tools: a web search runs at the vendor, outside the seats'
network, and a web fetch from the container reaches nothing (the model proxy refuses server-side
tools too). Claude Code: ``claude -p PROMPT --output-format stream-json --verbose
--dangerously-skip-permissions --disallowedTools WebSearch,WebFetch --model M`` (refused as
root; agents never run as root),
``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``, ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``
(no telemetry, update checks or error reports: the agent's network reaches only the model).
Its transcript: ``$HOME/.claude/projects/<cwd with / as ->/<session>.jsonl``.
Codex: ``codex exec --json --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check -m M
-c model_provider=swarmlab -c model_providers.swarmlab={base_url=..., env_key=OPENAI_API_KEY,
wire_api="responses"} -c otel.metrics_exporter=none -c analytics.enabled=false
-c features.plugins=false -c web_search="disabled" PROMPT`` — the container is the sandbox
(Codex's own needs landlock/seccomp, which a capability-less container does not give it); a
provider of our own naming reads the key from ``env_key`` without ``codex login`` and speaks
HTTP streaming (no websocket); without ``otel.metrics_exporter=none`` Codex spends ~5 s at
exit on a DNS lookup of its metrics host (``ab.chatgpt.com``) that the internal network never
answers. Its rollout:
``$HOME/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``. In the agent container ``HOME``
is ``/work/notes`` (the contract), so both records land in the agent's notes folder on the host.
Gemini CLI: ``node gemini.js --prompt=PROMPT --output-format stream-json --approval-mode yolo
--skip-trust --model M``, ``GEMINI_API_KEY`` / ``GOOGLE_GEMINI_BASE_URL`` (the ``@google/genai``
SDK's base URL: it calls ``{base}/v1beta/models/M:streamGenerateContent?alt=sse``), and read-only
system settings (``agents/client_config/gemini/settings.json``, mounted and named by
``GEMINI_CLI_SYSTEM_SETTINGS_PATH``, above any the agent writes): API-key auth, telemetry,
usage statistics, auto-update and its notification, session cleanup, the IDE and the
``google_web_search`` and ``web_fetch`` tools off.
``GEMINI_CLI_NO_RELAUNCH`` keeps it one process. Its chat record:
``$HOME/.gemini/tmp/<project name>/chats/session-*.jsonl``.

A record is read by ``analysis.tokens.read_usage(client.record_dir(notes),
client.record_format)``. :meth:`Client.spec_fields` gives what an
``isolation.backends.AgentSpec`` needs for a seat.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = PROJECT_ROOT / "results" / ".cache" / "clients"
CONTAINER_ROOT = "/opt/swarmlab/clients"
STAMP = ".swarmlab-installed"
# The container's PATH (isolation.backends.docker_env sets it; a command may prepend to it).
CONTAINER_PATH = "/opt/swarmlab/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


_TRIPLES = {"x64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


NODE_MAJOR = 20  # the Gemini CLI's engines field: node >= 20


@functools.cache
def _node_version(path: str) -> str:
    """``node --version`` of the program at ``path`` ('' when it is missing or fails)."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _node_major(path: str) -> int:
    version = _node_version(path).lstrip("v").split(".")[0]
    return int(version) if version.isdigit() else 0


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
        record_format: ``analysis.tokens`` format of those records.
        path_dirs: folders inside the install (templates as ``binary_path``) put in front of
            ``PATH`` (Codex's ``rg``).
        fixed_env: variables every invocation gets.
        interpreter: the program that runs ``binary_path`` when it is a script (Gemini CLI:
            the host's ``/usr/bin/node``, seen in the container through the ``/usr`` mount).
        settings_dir: a folder of this repository mounted read-only at :attr:`settings_mount`
            (the CLI's fixed settings: no telemetry, no update checks).
        auth_header: the header the vendor's API reads the key from (``authorization``:
            ``Bearer KEY``); the model proxy sets it (``runner.model_proxy``).
        api: the API the CLI speaks, whose model routes alone the model proxy forwards
            (``runner.model_proxy.API_ROUTES``).
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
    record_format: str
    path_dirs: tuple[str, ...] = ()
    fixed_env: Mapping[str, str] = field(default_factory=dict)
    interpreter: str = ""
    settings_dir: str = ""
    auth_header: str = "authorization"
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
        if self.interpreter and _node_major(self.interpreter) < NODE_MAJOR:
            raise ClientMissing(
                f"{self.name} ({self.spec}) runs on Node.js >= {NODE_MAJOR} at {self.interpreter}"
                f" (the agent container borrows the host's /usr), found"
                f" {_node_version(self.interpreter) or 'none'}: install Node.js there"
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

    def command(
        self,
        prompt: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The headless invocation in the container (argv; no secret in it)."""
        model = model or self.default_model
        if self.name == "claude_code":
            return [
                self.container_binary,
                "-p",
                prompt,
                "--output-format",
                "stream-json",
                "--verbose",
                "--dangerously-skip-permissions",
                # The seat's only network is the model proxy: no web tools (WebSearch would
                # make the vendor fetch for it; WebFetch reaches nothing from the container).
                "--disallowedTools",
                "WebSearch,WebFetch",
                "--model",
                model,
            ]
        if self.name == "codex":
            return [*self._codex_exec(environ), *self._codex_options(model, environ), prompt]
        if self.name == "gemini":
            return self._gemini_command(prompt, model)
        raise ValueError(f"no command for client {self.name!r}")

    def _gemini_command(self, prompt: str, model: str, *extra: str) -> list[str]:
        # --prompt=TEXT: a prompt that starts with "-" is still the prompt.
        return [
            self.interpreter,
            self.container_binary,
            f"--prompt={prompt}",
            "--output-format",
            "stream-json",
            "--approval-mode",
            "yolo",
            "--skip-trust",
            "--model",
            model,
            *extra,
        ]

    def _codex_exec(self, environ: Mapping[str, str] | None) -> list[str]:
        prefix = [f"{self.container_dir}/{self._resolve(d)}" for d in self.path_dirs]
        return [
            "/usr/bin/env",
            f"PATH={':'.join([*prefix, CONTAINER_PATH])}",
            self.container_binary,
            "exec",
        ]

    def _codex_options(self, model: str, environ: Mapping[str, str] | None) -> list[str]:
        provider = (
            f'{{name="swarmlab",base_url="{self.base_url(environ)}",'
            f'env_key="{self.key_env}",wire_api="responses"}}'
        )
        return [
            "--json",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            "-m",
            model,
            "-c",
            "model_provider=swarmlab",
            "-c",
            f"model_providers.swarmlab={provider}",
            "-c",
            "check_for_update_on_startup=false",
            "-c",
            "otel.metrics_exporter=none",
            "-c",
            "analytics.enabled=false",
            "-c",
            "features.plugins=false",
            # No web search: the vendor would search the web for the seat (see the proxy).
            "-c",
            'web_search="disabled"',
        ]

    @property
    def resumes_session(self) -> bool:
        """True when :meth:`resume_command` continues the recorded session; False for a CLI
        without session resume (mini-swe-agent), whose restart is a fresh session: the runner
        then gives it the seat's prompt followed by the keep-going message."""
        return True

    @property
    def resume_mechanism(self) -> str:
        """How :meth:`resume_command` continues a session, in the CLI's own words."""
        return {
            "claude_code": "claude -p --continue",
            "codex": "codex exec resume --last",
            "gemini": "gemini -p --resume latest",
        }[self.name]

    def resume_command(
        self,
        message: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The headless invocation that continues the most recent session recorded under
        ``HOME`` for the container's working directory, sending ``message`` as the next user
        turn: Claude Code's ``--continue`` (``-c``: "continue the most recent conversation in
        the current directory"), Codex's ``exec resume --last`` ("resume the most recent
        recorded session", filtered by the working directory). Both read the session from
        the record the first invocation left in ``HOME`` (the agent's notes folder, which
        survives the container), so the model sees its whole history again."""
        model = model or self.default_model
        if self.name == "claude_code":
            first = self.command(message, model, environ)
            return [*first[:3], "--continue", *first[3:]]
        if self.name == "codex":
            return [
                *self._codex_exec(environ),
                "resume",
                "--last",
                *self._codex_options(model, environ),
                message,
            ]
        if self.name == "gemini":
            return self._gemini_command(message, model, "--resume", "latest")
        raise ValueError(f"no resume command for client {self.name!r}")

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
        from isolation.images import BASE_TAG

        return {
            "image": BASE_TAG,
            "command": self.command(prompt, model, environ),
            "env": self.env(environ),
            "extra_mounts": self.mounts(root),
            "memory": "2g",
        }

    def record_dir(self, home: Path) -> Path:
        """Where the session records lie under ``home`` (the agent's notes folder)."""
        return Path(home) / self.records


_CODEX_VENDOR = "node_modules/@openai/codex-linux-{arch}/vendor/{triple}"

CLIENTS: dict[str, Client] = {
    "claude_code": Client(
        name="claude_code",
        package="@anthropic-ai/claude-code",
        version="2.1.332",
        binary_path="node_modules/@anthropic-ai/claude-code-linux-{arch}/claude",
        key_env="ANTHROPIC_API_KEY",
        base_url_env="ANTHROPIC_BASE_URL",
        default_base_url="https://api.anthropic.com",
        default_model="claude-sonnet-4-5",
        records=".claude/projects",
        record_format="claude_code",
        auth_header="x-api-key",
        api="anthropic",
        fixed_env={
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        },
    ),
    "codex": Client(
        name="codex",
        package="@openai/codex",
        version="0.171.0",
        binary_path=_CODEX_VENDOR + "/bin/codex",
        key_env="OPENAI_API_KEY",
        base_url_env="OPENAI_BASE_URL",
        default_base_url="https://api.openai.com/v1",
        default_model="gpt-5.5",
        records=".codex/sessions",
        record_format="codex",
        path_dirs=(_CODEX_VENDOR + "/codex-path",),
    ),
    "gemini": Client(
        name="gemini",
        package="@google/gemini-cli",
        version="0.61.0",
        binary_path="node_modules/@google/gemini-cli/bundle/gemini.js",
        key_env="GEMINI_API_KEY",
        base_url_env="GOOGLE_GEMINI_BASE_URL",
        default_base_url="https://generativelanguage.googleapis.com",
        default_model="gemini-2.5-pro",
        records=".gemini/tmp",
        record_format="gemini",
        interpreter="/usr/bin/node",
        settings_dir="agents/client_config/gemini",
        auth_header="x-goog-api-key",
        api="gemini",
        fixed_env={
            # Read-only settings above the user's: API key auth, no telemetry, no usage
            # statistics, no update checks, no session cleanup, no IDE, every folder trusted.
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH": f"{CONTAINER_ROOT}/gemini-settings/settings.json",
            # One process: no relaunch of itself as a child that the parent would outlive.
            "GEMINI_CLI_NO_RELAUNCH": "true",
        },
    ),
}

# mini-swe-agent (a PyPI package in a virtual environment of its own) adds itself to CLIENTS.
import agents.mini_swe  # noqa: E402,F401


def get_client(name: str) -> Client:
    try:
        return CLIENTS[name]
    except KeyError:
        raise ValueError(f"no agent CLI named {name!r}; known: {', '.join(CLIENTS)}") from None


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
    parser = argparse.ArgumentParser(prog="python -m agents.clients", description=__doc__)
    parser.add_argument("action", choices=("install", "check"))
    parser.add_argument("names", nargs="*", help=f"default: all ({', '.join(CLIENTS)})")
    args = parser.parse_args(argv)
    try:
        clients = [get_client(n) for n in args.names or CLIENTS]
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
    from agents.clients import main as _main  # the module proper: every client registered

    sys.exit(_main())
