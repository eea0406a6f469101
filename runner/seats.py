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

With ``agent.network=proxy`` (the default for every CLI) the seats reach their vendor only
through the run's model proxy (:mod:`isolation.model_proxy`, :func:`seat_proxy`): an internal
Docker network of the run on which containers cannot reach each other nor anything outside,
the proxy on its gateway, and in each container a seat token and the proxy's URL in place of
the key and the vendor's base URL.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from omegaconf import DictConfig, OmegaConf

from agents.apis import get_api
from agents.clients import Client, ClientMissing, KeyMissing, get_client, model_network
from arms.directions import direction_texts
from arms.prompts import RenderedPrompt, render_keep_going, render_prompt
from isolation.backends import AgentSpec
from isolation.fair_use import FairUse, limits_from
from isolation.host_firewall import HostFirewall, firewall_problem
from isolation.model_proxy import ModelProxy
from isolation.spending import TOKEN_BUDGETS, Limit, SpendingLedger, ledger_from
from isolation.workspace import AgentWorkspace, ArmWorkspace
from runner.events import EventLog
from tasks.schema import task_root

PROMPT_FILE = "prompt.md"
# agent=scripted: the program of agents/scripted/, with the task's move library mounted here.
SCRIPTED = "scripted"
MOVES_MOUNT = "/opt/swarmlab/moves"
# agent.network=proxy: the run's own network and model proxy (isolation.model_proxy).
PROXY = "proxy"


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
        if cfg.agent.get("network") == PROXY:
            return (
                f"agent.network={PROXY} is for the seats of a vendor's CLI,"
                f" not agent={cfg.agent.kind}"
            )
        return scripted_problem(cfg)
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
    if cfg.agent.network == PROXY:
        url = urlsplit(client.base_url(environ))
        if url.scheme not in ("http", "https") or not url.hostname:
            # The value is not printed: a base URL may carry a token.
            return f"{client.base_url_env} is not an http(s) URL: the model proxy forwards to one"
    return None


def task_moves(task: DictConfig) -> Path | None:
    """The task's move library (``task.moves``, a folder holding ``moves.json``), or None."""
    name = task.get("moves")
    folder = task_root(task) / name if name else None
    return folder if folder is not None and (folder / "moves.json").is_file() else None


def plays_moves(cfg: DictConfig) -> bool:
    """Whether the seats run the scripted agent on the task's move library (its command names
    the library's mount; a test's own ``agent.command`` need not)."""
    return cfg.agent.kind == SCRIPTED and any(MOVES_MOUNT in str(p) for p in cfg.agent.command)


def scripted_problem(cfg: DictConfig) -> str | None:
    """Why ``agent=scripted`` cannot play this task (it has no move library), or None."""
    if not plays_moves(cfg) or task_moves(cfg.task) is not None:
        return None
    where = task_root(cfg.task) / (cfg.task.get("moves") or "moves") / "moves.json"
    return (
        f"agent=scripted plays the task's move library, and task {cfg.task.name} has none"
        f" ({where} is missing): write one (docs/scripted-agent.md) or seat a real agent"
    )


def scripted_env(cfg: DictConfig) -> dict[str, str]:
    """The scripted agent's task card (``agents.scripted.card``), for its environment: all
    it knows of the task besides the move library."""
    from agents.scripted.card import ENV, make_card
    from judge import get_kind

    task = OmegaConf.to_container(cfg.task, resolve=True)
    metric = get_kind(cfg.task.kind).metric(cfg.task).to_dict()
    return {ENV: json.dumps(make_card(task, sys.executable, metric), sort_keys=True)}


@dataclass
class SeatProxy:
    """The run's model proxy and the internal network its seats are on."""

    network: str
    proxy: ModelProxy
    client: Client
    # The seats' token and cost budgets (isolation/spending.py); None without any.
    ledger: SpendingLedger | None = None

    def environ(self, arm: str, agent: str, environ: Mapping[str, str]) -> dict[str, str]:
        """``environ`` with a new seat token as the key and the proxy as the base URL."""
        return {
            **environ,
            self.client.key_env: self.proxy.add_seat(arm, agent),
            self.client.base_url_env: self.proxy.base_url,
        }


@contextmanager
def seat_proxy(
    cfg: DictConfig, events: EventLog, run_id: str, environ: Mapping[str, str] | None = None
) -> Iterator[SeatProxy | None]:
    """With ``agent.network=proxy`` and a CLI in the seats: the run's network
    (``swarmlab-seats-<run id>``: internal, containers cannot reach each other) and the model
    proxy on its gateway, forwarding to the host's base URL (or the vendor's) with the host's
    key, every call into ``events``. Otherwise None. On leaving, the proxy stops, the meta's
    ``proxy`` counts its calls, and the network is removed (its containers must be gone).
    """
    client = seat_client(cfg)
    if client is None or cfg.agent.network != PROXY:
        yield None
        return
    from isolation.images import docker_client

    environ = os.environ if environ is None else environ
    docker = docker_client()
    name, gateway = model_network(
        docker, f"swarmlab-seats-{run_id}", isolated=True, labels={"org.swarmlab.run": run_id}
    )
    summary: dict[str, Any] = {"network": name}
    proxy: ModelProxy | None = None
    firewall: HostFirewall | None = None
    ledger = spending_ledger(cfg, events)
    try:
        proxy = ModelProxy(
            client.base_url(environ),
            environ[client.key_env],
            get_api(client.api),
            host=gateway,
            record=events.add_model_call,
            server_tools=bool(cfg.agent.get("server_tools", False)),
            fair_use=_fair_use(cfg, summary),
            spending=ledger,
            on_budget=ledger.note_refused if ledger is not None else None,
        ).start()
        summary["host_firewall"], firewall = _close_the_host(docker, name, gateway, proxy)
        yield SeatProxy(name, proxy, client, ledger)
    finally:
        if firewall is not None:
            firewall.remove()
        if proxy is not None:
            proxy.stop()
            summary.update(
                calls=proxy.call_count,
                refused_connections=proxy.refused_connections,
                record_errors=proxy.record_errors[:10],
            )
        if ledger is not None:
            summary["spending"] = ledger.totals()
        try:
            docker.networks.get(name).remove()
        except Exception as exc:  # a leftover network is untidy, not a reason to lose the run
            summary["network_error"] = f"not removed: {exc}"
        finally:
            docker.close()
            events.set_meta(proxy=summary)


def spending_ledger(cfg: DictConfig, events: EventLog | None = None) -> SpendingLedger | None:
    """The ledger of the run's token and cost budgets (``budget.output_tokens``,
    ``input_tokens``, ``cost_usd``, each per arm or per seat; ``match`` forces per arm), or
    None without any. A resumed run's ledger starts from the calls ``events`` already holds."""
    from runner.config import budget_scope

    budget = cfg.get("budget") or {}
    limits = [
        Limit(name, float(budget[name]), budget_scope(cfg, name))
        for name in TOKEN_BUDGETS
        if budget.get(name) is not None
    ]
    if not limits:
        return None
    prices = OmegaConf.to_container(budget.prices, resolve=True) if budget.get("prices") else {}
    ledger = ledger_from(limits, prices)  # type: ignore[arg-type]
    for row in events.table("model_calls") if events is not None else []:
        if row["arm"] and row["agent"]:
            ledger.add_for(row["arm"], row["agent"], _Recorded(row))
    return ledger


class _Recorded:
    """A ``model_calls`` row as the ledger reads usage."""

    def __init__(self, row: Mapping[str, Any]) -> None:
        self.model = str(row.get("model") or "")
        self.input, self.cache_read = row.get("input"), row.get("cache_read")
        self.cache_write, self.output = row.get("cache_write"), row.get("output")


def run_seats(cfg: DictConfig) -> int:
    """Every seat of the run, both arms counted: the account's limits are shared among them."""
    return sum(len(arm.seats) for arm in (cfg.get("arms") or {}).values())


def _fair_use(cfg: DictConfig, summary: dict[str, Any]) -> FairUse | None:
    """The proxy's per-seat limits (``isolation.fair_use``), recorded in the meta's ``proxy``;
    None without any."""
    limits = limits_from((cfg.get("isolation") or {}).get("fair_use"), run_seats(cfg))
    summary["fair_use"] = limits.to_dict() if limits.limited else None
    return FairUse(limits) if limits.limited else None


def _close_the_host(
    docker: Any, network: str, gateway: str, proxy: ModelProxy
) -> tuple[str, HostFirewall | None]:
    """Host rules letting the seats' network reach the proxy's port and no other service of
    this host; (what the meta says, the rules to remove). Without root or iptables the run goes
    on with a warning: the seats can then reach host services listening on all addresses."""
    problem = firewall_problem()
    if problem is None:
        net = docker.networks.get(network)
        options = net.attrs.get("Options") or {}
        bridge = options.get("com.docker.network.bridge.name") or f"br-{net.id[:12]}"
        firewall = HostFirewall(bridge, gateway, proxy.address[1], f"swarmlab {network}")
        try:
            firewall.apply()
        except RuntimeError as exc:
            problem = str(exc)
        else:
            return f"on: from {bridge} only tcp {gateway}:{proxy.address[1]} (the proxy)", firewall
    print(f"WARNING: host firewall for the seats off ({problem})", file=sys.stderr, flush=True)
    return f"off: {problem}", None


def is_solo(arm: ArmWorkspace) -> bool:
    """A worker with no teammates is told it is alone, as is each seat of a private arm (it
    sees no teammate's board posts or submissions: its board is its own log)."""
    return len(arm.agents) == 1 or arm.private


def seat_prompt(
    ws: AgentWorkspace,
    arm: ArmWorkspace,
    deadline: float,
    directions: Mapping[str, str],
) -> RenderedPrompt:
    """The seat's prompt; `directions` (name -> text, :func:`arms.directions.direction_texts`)
    says what its direction means."""
    direction = ws.direction or ""
    text = directions.get(direction, "")
    return render_prompt(
        ws.role, ws.name, deadline, direction, solo=is_solo(arm), direction_text=text
    )


def record_prompts(
    arms: list[ArmWorkspace], deadline: float, directions: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Render every seat's prompt, write its text beside the seat's folders, and return what
    the meta records: ``{arm: {seat: {role, sha256, template_sha256, version, file}}}``.
    `directions`: the task's (name -> text), as every seat's own prompt has them."""
    keep_going = render_keep_going(deadline)
    out: dict[str, dict[str, Any]] = {}
    for arm in arms:
        out[arm.name] = {}
        for name, ws in arm.agents.items():
            prompt = seat_prompt(ws, arm, deadline, directions)
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
    proxied = cfg.agent.network == PROXY
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
        "proxy": proxied,
        "upstream_host": urlsplit(client.base_url()).hostname if proxied else None,
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
    proxied: SeatProxy | None = None,
) -> AgentSpec:
    """``spec`` (as built for any seat: the contract's mounts, tools, limits, labels) turned
    into a seat of the configured CLI (on ``proxied``'s network, with a seat token, when given).

    Raises:
        KeyMissing, ClientMissing: checked before by :func:`seat_problem`.
    """
    client = seat_client(cfg)
    if client is None:
        return spec
    environ = os.environ if environ is None else environ
    network = spec.network
    if proxied is not None:
        environ = proxied.environ(spec.arm, spec.agent, environ)
        network = proxied.network
    model = cfg.agent.get("model") or None
    prompt = seat_prompt(spec.workspace, arm, deadline, direction_texts(cfg.task))
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
        network=network,
        memory=cfg.agent.get("memory") or cfg.isolation.memory,
        extra_mounts={**spec.extra_mounts, **fields["extra_mounts"]},  # type: ignore[dict-item]
        resume_command=(client.resume_command(keep_going, model, environ) if resume else []),
        resume_mechanism=client.resume_mechanism if resume else "",
        records=str(client.record_dir(Path(spec.workspace.notes))),
        records_format=client.record_format,
    )
