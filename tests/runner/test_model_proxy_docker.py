"""The seats' network, with real containers: on a run's proxy network
(``agents.clients.model_network(isolated=True)``) a seat reaches the model proxy on the gateway
and nothing else — not another seat, not the outside, not a service on the host's loopback."""

from __future__ import annotations

import json
import os
import time

import pytest

from agents.clients import model_network
from agents.endpoints import ENDPOINTS, session_script
from runner.model_proxy import ModelProxy

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


@pytest.mark.docker
def test_a_seat_reaches_the_proxy_and_nothing_else(docker_client, base_image):
    tag = f"{os.getpid()}-{time.time_ns() % 10**6}"
    networks = []
    servers = []
    try:
        # The run's network (containers cannot reach each other) and, as a control showing the
        # probe can see a reachable seat, an internal network that lets them.
        seats, gateway = model_network(docker_client, f"swarmlab-test-seats-{tag}", isolated=True)
        control, _ = model_network(docker_client, f"swarmlab-test-open-{tag}")
        networks += [seats, control]
        endpoint = ENDPOINTS["anthropic"](session_script("anthropic"), api_key=KEY)
        with (
            endpoint,
            ModelProxy(endpoint.url, KEY, "x-api-key", "anthropic", host=gateway) as proxy,
        ):
            token = proxy.add_seat("solo", "w1")
            results = {}
            for network in (seats, control):
                server = _run(
                    docker_client, base_image, network,
                    ["/usr/bin/python3", "-m", "http.server", "8000"], detach=True,
                )  # fmt: skip
                servers.append(server)
                time.sleep(1.0)  # the server binds its port
                targets = [
                    ["other_seat", _ip(server, network), 8000],
                    ["outside", "1.1.1.1", 443],
                    ["host_loopback_service", gateway, endpoint.address[1]],
                ]
                out = _run(
                    docker_client, base_image, network,
                    ["/usr/bin/python3", "-c", PROBE, json.dumps(targets), gateway,
                     str(proxy.address[1]), token],
                    detach=False,
                )  # fmt: skip
                results[network] = json.loads(out.decode().strip().splitlines()[-1])
    finally:
        for server in servers:
            server.remove(force=True)
        for name in networks:
            docker_client.networks.get(name).remove()
    on_seats, on_control = results[seats], results[control]
    assert on_control["other_seat"] == "connected", results  # the probe can see a seat
    assert on_seats["other_seat"] != "connected", results
    assert on_seats["outside"] != "connected" and on_control["outside"] != "connected", results
    assert on_seats["host_loopback_service"] != "connected", results
    assert on_seats["proxy"] == 200, results
    assert [r.authorized for r in endpoint.requests] == [True, True]  # the key was the proxy's
