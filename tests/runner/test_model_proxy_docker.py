"""The seats' network, with real containers: on a run's proxy network (``runner.seats.seat_proxy``:
internal, no traffic between containers, host firewall) a seat reaches the model proxy on the
gateway and nothing else — not another seat, not the outside, not a service of the host."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time

import pytest
from omegaconf import OmegaConf

from agents.clients import model_network
from isolation.host_firewall import firewall_problem
from runner.events import EventLog
from runner.seats import seat_proxy
from tests.support.ci import in_ci
from tests.support.endpoints import ENDPOINTS, session_script

KEY = "sk-real-vendor-key-for-the-network-test"

# Run in the probing container: try each target, print one JSON object.
PROBE = r"""
import http.client, json, socket, sys
out = {}
for name, host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        out[name] = "connected"
    except OSError as exc:
        out[name] = type(exc).__name__
host, port, token = sys.argv[2:5]
try:
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10,
                       "messages": [{"role": "user", "content": "hi"}]})
    conn.request("POST", "/v1/messages", body, {"x-api-key": token,
                                                "content-type": "application/json"})
    out["proxy"] = conn.getresponse().status
except OSError as exc:
    out["proxy"] = type(exc).__name__
print(json.dumps(out))
"""


def _run(docker_client, image: str, network: str, command: list[str], detach: bool):
    return docker_client.containers.run(
        image,
        command,
        network=network,
        volumes={"/usr": {"bind": "/usr", "mode": "ro"}},
        user="65534:65534",
        cap_drop=["ALL"],
        detach=detach,
        remove=not detach,
        labels={"org.swarmlab.test": "model-proxy-network"},
    )


def _ip(container, network: str) -> str:
    container.reload()
    return container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]


class _HostService:
    """A TCP service of the host listening on all addresses (as sshd or a notebook would)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()

    def close(self) -> None:
        self.sock.close()


def _probe(docker_client, image: str, network: str, gateway: str, proxy_port: int, token: str,
           host_port: int) -> dict:  # fmt: skip
    """Start a listening seat on ``network``, then probe from another: that seat, the
    outside, the host's service, and a model call through the proxy."""
    server = _run(
        docker_client, image, network, ["/usr/bin/python3", "-m", "http.server", "8000"],
        detach=True,
    )  # fmt: skip
    try:
        time.sleep(1.0)  # the server binds its port
        targets = [
            ["other_seat", _ip(server, network), 8000],
            ["outside", "1.1.1.1", 443],
            ["host_service", gateway, host_port],
        ]
        out = _run(
            docker_client, image, network,
            ["/usr/bin/python3", "-c", PROBE, json.dumps(targets), gateway, str(proxy_port),
             token],
            detach=False,
        )  # fmt: skip
        return json.loads(out.decode().strip().splitlines()[-1])
    finally:
        server.remove(force=True)


@pytest.mark.docker
def test_a_seat_reaches_the_proxy_and_nothing_else(docker_client, base_image, tmp_path):
    """The run's seats network as ``runner.seats.seat_proxy`` sets it up (proxy, network, host
    firewall) against a control network without any of it, probed from real containers."""
    problem = firewall_problem()
    if problem and not in_ci():
        pytest.skip(f"host firewall: {problem}")
    tag = f"{os.getpid()}-{time.time_ns() % 10**6}"
    cfg = OmegaConf.create(
        {
            "agent": {"client": "claude_code", "network": "proxy"},
            # Equal shares of the account over the run's two seats (isolation/fair_use.py).
            "isolation": {"fair_use": {"account_rpm": 120, "account_concurrency": 4}},
            "arms": {"swarm": {"seats": [{"name": "w1"}]}, "solo": {"seats": [{"name": "w1"}]}},
        }
    )
    events = EventLog(tmp_path / "events.sqlite")
    service = _HostService()
    endpoint = ENDPOINTS["anthropic"](session_script("anthropic"), api_key=KEY)
    control, control_gateway = model_network(docker_client, f"swarmlab-test-open-{tag}")
    try:
        environ = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": endpoint.url}
        with endpoint, seat_proxy(cfg, events, f"test-{tag}", environ) as seats:
            assert seats is not None
            gateway, port = seats.proxy.address
            token = seats.environ("solo", "w1", {})["ANTHROPIC_API_KEY"]
            assert token.startswith("sk-swarmlab-seat-")
            on_seats = _probe(docker_client, base_image, seats.network, gateway, port, token,
                              service.port)  # fmt: skip
            on_control = _probe(docker_client, base_image, control, control_gateway, port,
                                token, service.port)  # fmt: skip
            rules = subprocess.run(["iptables", "-S", "INPUT"], capture_output=True, text=True)
    finally:
        service.close()
        docker_client.networks.get(control).remove()
    results = {"seats": on_seats, "control": on_control}
    # The control shows the probe can see a reachable seat and a reachable host service.
    assert on_control["other_seat"] == "connected", results
    assert on_control["host_service"] == "connected", results
    assert on_seats["other_seat"] != "connected", results
    assert on_seats["host_service"] != "connected", results
    assert on_seats["outside"] != "connected" and on_control["outside"] != "connected", results
    assert on_seats["proxy"] == 200, results
    assert all(r.authorized for r in endpoint.requests)  # the key was the proxy's
    meta = events.meta()["proxy"]
    assert meta["fair_use"] == {"concurrency": 2, "rpm": 60.0, "max_wait_s": 60.0}, meta
    assert meta["host_firewall"].startswith("on: "), meta
    assert f"swarmlab {meta['network']}" in rules.stdout  # while it ran
    after = subprocess.run(["iptables", "-S", "INPUT"], capture_output=True, text=True).stdout
    assert meta["network"] not in after  # and gone with the network
    assert not docker_client.networks.list(names=[meta["network"]])
