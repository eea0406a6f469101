"""Real agent CLIs in the seats (``agent=claude_code | codex``): the checks made before anything
starts, each seat's prompt, and the parts of its :class:`~isolation.backends.AgentSpec` that a
vendor's CLI needs.

A seat of a real CLI gets the rendered prompt of its role from :mod:`arms.prompts` (a worker
with its direction, the critic, a worker told it is alone when its arm has one seat), the CLI
from :mod:`agents.clients` mounted read-only, the key and base URL from the host's environment
(in the container's environment only, never in a file), and how to resume: the CLI's own
session resume with the keep-going message (:meth:`agents.clients.Client.resume_command`).
The prompt's text goes into ``arms/<arm>/agents/<seat>/prompt.md`` (the run directory, not the
agent's folders), its hashes into the run's meta (``prompts``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from agents.clients import Client, ClientMissing, KeyMissing, get_client
from arms.prompts import RenderedPrompt, render_keep_going, render_prompt
from isolation.backends import AgentSpec
from isolation.workspace import AgentWorkspace, ArmWorkspace

PROMPT_FILE = "prompt.md"


def seat_client(cfg: DictConfig) -> Client | None:
    """The vendor CLI of ``agent=``, or None for a program (the scripted agent)."""
    name = cfg.agent.get("client")
    return get_client(name) if name else None


def seat_problem(cfg: DictConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the seats cannot start, in one line, or None. Cheap (no engine, no network): run
    it before the judge and before any container starts."""
    try:
        client = seat_client(cfg)
    except ValueError as exc:
        return f"agent.client: {exc}"
    if client is None:
        return None
    if cfg.isolation.backend != "docker":
        return (
            f"agent={cfg.agent.kind} runs its CLI inside the agent container:"
            f" isolation={cfg.isolation.backend} is not supported, use isolation=docker"
        )
    try:
        client.check_key(environ)
    except KeyMissing as exc:
        return str(exc)
    try:
        client.binary()
    except ClientMissing as exc:
        return f"{exc}; `make clients` installs every CLI"
    return None


def is_solo(arm: ArmWorkspace) -> bool:
    """A worker with no teammates is told it is alone."""
    return len(arm.agents) == 1


def seat_prompt(ws: AgentWorkspace, arm: ArmWorkspace, deadline: float) -> RenderedPrompt:
    return render_prompt(ws.role, ws.name, deadline, ws.direction or "", solo=is_solo(arm))


def record_prompts(arms: list[ArmWorkspace], deadline: float) -> dict[str, dict[str, Any]]:
    """Render every seat's prompt, write its text beside the seat's folders, and return what
    the meta records: ``{arm: {seat: {role, sha256, template_sha256, version, file}}}``."""
    keep_going = render_keep_going(deadline)
    out: dict[str, dict[str, Any]] = {}
    for arm in arms:
        out[arm.name] = {}
        for name, ws in arm.agents.items():
            prompt = seat_prompt(ws, arm, deadline)
            path = ws.root / PROMPT_FILE
            path.write_text(prompt.text)
            out[arm.name][name] = {
                "role": prompt.role,
                "direction": ws.direction,
                "solo": is_solo(arm),
                "sha256": prompt.sha256,
                "template_sha256": prompt.template_sha256,
                "version": prompt.version,
                "keep_going_sha256": keep_going.sha256,
                "file": str(path.relative_to(arm.root.parent.parent)),
            }
    return out


def client_meta(cfg: DictConfig) -> dict[str, Any] | None:
    """What the meta says about the CLI in the seats (None for the scripted agent)."""
    client = seat_client(cfg)
    if client is None:
        return None
    return {
        "name": client.name,
        "package": client.package,
        "version": client.version,
        "model": cfg.agent.get("model") or client.default_model,
        # The variables' names, never their values (a base URL may carry a token too).
        "key_env": client.key_env,
        "base_url_env": client.base_url_env,
        "base_url_set": bool(os.environ.get(client.base_url_env)),
        "network": cfg.agent.network,
        "resume": client.resume_mechanism if cfg.agent.get("resume", True) else "fresh start",
        "records": client.records,
        "record_format": client.record_format,
    }


def real_seat(
    cfg: DictConfig,
    spec: AgentSpec,
    arm: ArmWorkspace,
    deadline: float,
    environ: Mapping[str, str] | None = None,
) -> AgentSpec:
    """``spec`` (as built for any seat: the contract's mounts, tools, limits, labels) turned
    into a seat of the configured CLI.

    Raises:
        KeyMissing, ClientMissing: checked before by :func:`seat_problem`.
    """
    client = seat_client(cfg)
    if client is None:
        return spec
    environ = os.environ if environ is None else environ
    model = cfg.agent.get("model") or None
    prompt = seat_prompt(spec.workspace, arm, deadline)
    fields = client.spec_fields(prompt.text, model, environ)
    resume = cfg.agent.get("resume", True)
    keep_going = render_keep_going(deadline).text
    if not client.resumes_session:  # a fresh session: the task again, then the keep-going words
        keep_going = f"{prompt.text.rstrip()}\n\n{keep_going}"
    return replace(
        spec,
        command=list(fields["command"]),  # type: ignore[call-overload]
        env={**spec.env, **fields["env"]},  # type: ignore[dict-item]
        image=str(fields["image"]),
        memory=cfg.agent.get("memory") or cfg.isolation.memory,
        extra_mounts={**spec.extra_mounts, **fields["extra_mounts"]},  # type: ignore[dict-item]
        resume_command=(client.resume_command(keep_going, model, environ) if resume else []),
        resume_mechanism=client.resume_mechanism if resume else "",
        records=str(client.record_dir(Path(spec.workspace.notes))),
        records_format=client.record_format,
    )
