"""mini-swe-agent in a seat (``agent=mini_swe``): a Python CLI, installed into a virtual
environment of its own rather than with npm.

**Install.** ``python -m agents.clients install mini_swe`` makes a virtual environment with the
runner's own base interpreter (``sys._base_executable``: the one
:func:`isolation.images.host_python_mounts` mounts read-only into every agent container, with
the host's ``/usr``) in ``results/.cache/clients/mini_swe-<version>/venv`` and installs
``mini-swe-agent==<version>`` into it from PyPI, wheels only (no package's build code runs),
with :data:`CONSTRAINTS` pinning LiteLLM and the OpenAI SDK, less :data:`SKIPPED` (``pip
freeze`` of the result: ``requirements.lock`` beside it). The folder is mounted read-only at
``/opt/swarmlab/clients/mini_swe``; a virtual environment works from any path when run as
``venv/bin/python -m ...`` (its ``pyvenv.cfg`` names only the base interpreter), so the entry
point scripts, whose ``#!`` lines name the install path, are never used. An environment made
with another interpreter than the runner's is reported as not installed.

**Invocation.** ``python -m minisweagent.run.mini -y --exit-immediately -l 0 -m openai/MODEL
-c .../minisweagent/config/mini.yaml -c environment.timeout=600 -o TRAJ -t PROMPT``: the
``mini`` CLI in yolo mode (no confirmation), ending when the model ends the task rather than
asking for a new one, no cost limit (the deadline ends a session), the default config by its
full path (the ``bash`` tool through LiteLLM's Chat Completions; the session ends when a
command's output starts with
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``), commands run by ``subprocess`` in the container
(its ``local`` environment). LiteLLM's ``openai/`` provider reads ``OPENAI_API_KEY`` and
``OPENAI_BASE_URL`` from the environment (any OpenAI-compatible server); the model gets the
``openai/`` prefix when it lacks it. Offline settings: ``LITELLM_LOCAL_MODEL_COST_MAP`` (no
fetch of the cost map from GitHub at import), ``LITELLM_OFFLINE_MODE`` (no catalog, check or
tokenizer fetched on LiteLLM's own initiative), ``MSWEA_CONFIGURED`` (no first-run setup
prompt), ``MSWEA_COST_TRACKING=ignore_errors`` (a model missing from LiteLLM's cost map costs
0 instead of aborting), Hugging Face offline.

**Records.** Each start writes its own trajectory,
``$HOME/.config/mini-swe-agent/trajectories/<UTC time>.traj.json`` (saved after every step),
read by :meth:`MiniSweClient.read_records`: each model call keeps its own usage in its message
(the raw response under ``extra.response``, or the message itself for Responses-API models), a
call whose reply failed to parse included: its format-error message (role ``user``,
``extra.interrupt_type`` ``FormatError``) carries that call's ``extra.response`` and cost. Every
message is one call and every call is summed: the trajectory is rewritten whole at each step and
a restart writes a new file, so nothing in it is a copy, and a response id is no call's identity
(OpenAI-compatible servers and gateways reuse, fix or blank ids). LiteLLM's ``prompt_tokens``
includes cache reads and writes, so both are subtracted; the tool's own cost is
``info.model_stats.instance_cost``.

**Early exit.** mini-swe-agent has no session resume: a restart is a fresh session whose task
is the seat's prompt followed by the keep-going message (``resumes_session`` is False; the
mechanism string says so), with its own trajectory file beside the earlier ones.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.clis.base import STAMP, Client, ClientMissing
from agents.clis.registry import register_cli
from agents.usage import (
    UsageByModel,
    api_usage,
    as_dict,
    as_float,
    as_str,
    json_records,
    read_text,
)

# What mini-swe-agent's own requirements leave open, pinned (LiteLLM 1.82.7 and 1.82.8 were
# compromised releases; mini-swe-agent excludes them, a pin keeps any later surprise out too).
CONSTRAINTS = ("litellm==1.110.2", "openai==3.57.0")
# mini-swe-agent's requirements that the ``mini`` CLI never imports: ``datasets`` serves only
# ``mini-extra swebench`` and brings pyarrow, pandas and numpy (~340 MB of the ~750 MB).
SKIPPED = frozenset({"datasets"})
VENV = "venv"
TRAJECTORIES = ".config/mini-swe-agent/trajectories"
FINISH_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# The longest a single command may run (mini-swe-agent's default is 30 s: too short to build).
COMMAND_TIMEOUT_S = 600
# Each start its own trajectory file, named by the container's clock (starts are seconds apart).
_LAUNCH = (
    'exec "$0" -m minisweagent.run.mini -o '
    f'"$HOME/{TRAJECTORIES}/$(date -u +%Y%m%dT%H%M%S.%NZ).traj.json" "$@"'
)
# tenacity's before_sleep_log line for one of mini-swe-agent's model retries.
_RETRY = re.compile(r"Retrying .* in (\d+(?:\.\d+)?) seconds as it raised (\w+)")


def _base_python() -> str:
    """The runner's base interpreter: the one every agent container has mounted."""
    return getattr(sys, "_base_executable", "") or sys.executable


def _venv_home(venv: Path) -> str:
    try:
        text = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return ""
    match = re.search(r"^home\s*=\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else ""


@dataclass(frozen=True)
class MiniSweClient(Client):
    """mini-swe-agent: ``package`` is the PyPI distribution, ``binary_path`` the virtual
    environment's interpreter."""

    @property
    def resumes_session(self) -> bool:
        return False

    @property
    def resume_mechanism(self) -> str:
        return "fresh start with the prompt and the keep-going message (no session resume)"

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def install_note(self) -> str:
        return "pip, ~420 MB, needs PyPI once"

    def binary(self, root: Path | None = None) -> Path:
        """The virtual environment's interpreter.

        Raises:
            ClientMissing: not installed, half installed, or made with an interpreter other
                than the runner's base one (which containers would not have).
        """
        path = super().binary(root)
        home = _venv_home(self.install_dir(root) / VENV)
        want = str(Path(_base_python()).parent)
        if home not in (want, os.path.realpath(want)):
            raise ClientMissing(
                f"{self.name} ({self.spec}) in {self.install_dir(root)} was made with the"
                f" Python in {home or '?'}, not the runner's ({want}), which is what agent"
                f" containers mount: `{self.install_command}` makes it again"
            )
        return path

    def install(self, root: Path | None = None, npm: str = "npm", timeout: float = 900) -> Path:
        """Make the virtual environment and pip-install the pinned package (no-op when already
        there); the interpreter's path. Built in a temporary folder renamed into place at the
        end: an interrupted install never looks installed."""
        del npm  # not an npm package
        if self.installed(root):
            return self.binary(root)
        final = self.install_dir(root)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():  # a stale install (another interpreter): replaced
            shutil.rmtree(final)
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            venv = work / VENV
            self._run([_base_python(), "-m", "venv", str(venv)], timeout)
            constraints = work / "constraints.txt"
            constraints.write_text("".join(f"{c}\n" for c in CONSTRAINTS))
            python = str(venv / "bin" / "python")
            pip = [
                python, "-m", "pip", "install", "--no-input", "--quiet",
                "--disable-pip-version-check", "--no-warn-script-location",
                "--only-binary=:all:",  # wheels only: no package's build code runs here
                "--constraint", str(constraints),
            ]  # fmt: skip
            self._run([*pip, "--no-deps", self.spec], timeout)
            self._run([*pip, *self._requirements(python)], timeout)
            frozen = self._run([python, "-m", "pip", "freeze", "--all"], 120)
            (work / "requirements.lock").write_text(frozen)
            os.chmod(work, 0o755)  # mkdtemp's 0700 would hide it from the agent's uid
            (work / STAMP).write_text(f"{self.spec}\n{time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
            work.rename(final)
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
        return self.binary(root)

    def _requirements(self, python: str) -> list[str]:
        """The installed package's own requirements (no extras), less :data:`SKIPPED`."""
        script = (
            "import importlib.metadata as m, re, sys\n"
            "for r in m.requires(sys.argv[1]) or []:\n"
            "    if 'extra ==' not in r: print(r)\n"
        )
        wanted = []
        for line in self._run([python, "-c", script, self.package], 120).splitlines():
            name = re.split(r"[\s;<>=!~\[(]", line.strip(), maxsplit=1)[0]
            if line.strip() and name.lower().replace("_", "-") not in SKIPPED:
                wanted.append(line.strip())
        return wanted

    def _run(self, argv: list[str], timeout: float) -> str:
        env = {**os.environ, "PIP_NO_INPUT": "1", "PYTHONNOUSERSITE": "1"}
        env.pop("PYTHONPATH", None)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        if done.returncode != 0:
            raise ClientMissing(
                f"installing {self.spec}: {' '.join(argv[:4])} ... failed ({done.returncode}):"
                f" {(done.stderr or done.stdout).strip()[-2000:]}"
            )
        return done.stdout

    def count_retries(self, output: str) -> dict[str, Any]:
        """The model retries mini-swe-agent announced in its output (tenacity's ``Retrying ...
        in N seconds as it raised ERROR`` lines): ``count``, ``waited_s``, ``statuses``
        (error: count)."""
        count, waited = 0, 0.0
        statuses: dict[str, int] = {}
        for match in _RETRY.finditer(output):
            count += 1
            waited += float(match.group(1))
            statuses[match.group(2)] = statuses.get(match.group(2), 0) + 1
        return {"count": count, "statuses": statuses, "waited_s": round(waited, 3)}

    def claims_document(self, obj: Any) -> bool:
        if isinstance(obj, list):
            # mini-swe-agent's oldest trajectories were a bare list of chat messages.
            return bool(obj) and all(isinstance(m, dict) and "role" in m for m in obj)
        if not isinstance(obj, dict):
            return False
        if str(obj.get("trajectory_format", "")).startswith("mini-swe-agent"):
            return True
        return isinstance(obj.get("messages"), list) and "model_stats" in as_dict(obj.get("info"))

    def read_records(self, paths: list[Path]) -> UsageByModel:
        return read_mini_swe(paths)

    @property
    def cost_source(self) -> str | None:
        return "mini_swe info.model_stats.instance_cost (the CLI's own LiteLLM estimate)"

    # -- in the container ----------------------------------------------------------------

    @staticmethod
    def litellm_model(model: str) -> str:
        """LiteLLM's name for ``model`` on the OpenAI-compatible endpoint of ``OPENAI_BASE_URL``."""
        return model if model.startswith("openai/") else f"openai/{model}"

    @property
    def container_config(self) -> str:
        """mini-swe-agent's default config (``mini.yaml``) by its path in the container: a bare
        ``mini.yaml`` would be looked for in the working directory (the agent's clone) first.
        The environment was made with the runner's interpreter, so its ``lib/pythonX.Y``."""
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return (
            f"{self.container_dir}/{VENV}/lib/{version}/site-packages/minisweagent/config/mini.yaml"
        )

    def command(
        self,
        prompt: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        """``/bin/sh -c LAUNCH PYTHON ARGS``: the shell only names this start's trajectory file
        and execs the interpreter (argv: no secret in it)."""
        model = self.litellm_model(model or self.default_model)
        return [
            "/bin/sh", "-c", _LAUNCH, self.container_binary,
            "-y", "--exit-immediately", "-l", "0", "-m", model,
            "-c", self.container_config, "-c", f"environment.timeout={COMMAND_TIMEOUT_S}",
            "-t", prompt,
        ]  # fmt: skip

    def resume_command(
        self,
        message: str,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> list[str]:
        """A fresh session with ``message`` as its task (the runner passes the seat's prompt
        followed by the keep-going message: see ``resumes_session``)."""
        return self.command(message, model, environ)


def _mini_swe_calls(
    messages: list[Any],
) -> Iterator[tuple[str | None, dict[str, Any], float | None]]:
    """Each model call's (model, usage, cost): one per message that carries a usage."""
    for message in messages:
        if not isinstance(message, dict):
            continue
        extra = as_dict(message.get("extra"))
        # A string here is mini-swe-agent's repr() fallback for a response it could not dump.
        response = as_dict(extra.get("response"))
        if isinstance(response.get("usage"), dict):
            # Chat Completions models, and any model's call that ended in a format error (its
            # message is the user's, the reply that failed to parse is under extra.response).
            yield as_str(response.get("model")), response["usage"], as_float(extra.get("cost"))
        elif isinstance(message.get("usage"), dict):
            # Responses-API models store the response itself as the message.
            yield as_str(message.get("model")), message["usage"], as_float(extra.get("cost"))


def read_mini_swe(paths: list[Path]) -> UsageByModel:
    """mini-swe-agent trajectories' usage (the rules are in the module's docstring)."""
    result = UsageByModel()
    for path in paths:
        records = json_records(read_text(path))
        document = records[0] if len(records) == 1 else None
        if isinstance(document, dict):
            messages = document.get("messages")
            info = as_dict(document.get("info"))
        else:
            messages, info = document, {}
        if not isinstance(messages, list):
            continue
        configured = as_str(as_dict(as_dict(info.get("config")).get("model")).get("model_name"))
        file_result = UsageByModel()
        # No de-duplication by response id: every message is a call of its own (see above).
        for model, usage, cost in _mini_swe_calls(messages):
            call = api_usage(usage)
            call.cost_estimate = cost
            file_result.add(model or configured, call)
        instance_cost = as_float(as_dict(info.get("model_stats")).get("instance_cost"))
        if instance_cost is not None and len(file_result.usage) == 1:
            # The tool's own total wins over the sum of per-call costs where it can be placed.
            next(iter(file_result.usage.values())).cost_estimate = instance_cost
        call_costs = [u.cost_estimate for u in file_result.usage.values()]
        file_cost = instance_cost
        if file_cost is None and any(c is not None for c in call_costs):
            file_cost = sum(c for c in call_costs if c is not None)
        for name, usage in file_result.usage.items():
            result.add(name, usage)
        if file_cost is not None:
            result.cost_total = (result.cost_total or 0.0) + file_cost
    return result


MINI_SWE = register_cli(
    MiniSweClient(
        name="mini_swe",
        package="mini-swe-agent",
        version="2.4.6",
        binary_path=f"{VENV}/bin/python",
        key_env="OPENAI_API_KEY",
        base_url_env="OPENAI_BASE_URL",
        default_base_url="https://api.openai.com/v1",
        default_model="openai/gpt-5.5",
        records=TRAJECTORIES,
        fixed_env={
            "MSWEA_CONFIGURED": "true",
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_OFFLINE_MODE": "true",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "DO_NOT_TRACK": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        },
    )
)
