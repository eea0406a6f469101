"""Keeps the containers of one Docker network away from the host's own services.

A container on an internal Docker network has no route out, but it still reaches the host at
the network's gateway address, where any service listening on all addresses (sshd, a local
model server, a notebook) answers. Docker's rules filter forwarded traffic, not traffic to the
host itself. :class:`HostFirewall` adds two ``iptables`` rules to the host's ``INPUT`` chain for
the network's bridge interface: TCP to one address and port (the model proxy) is accepted,
everything else from that interface is dropped. Both carry a comment naming the network, and
:meth:`HostFirewall.remove` deletes them (also rules left by a run that was killed).

It needs root and ``iptables`` (the Docker engine's own dependency); :func:`firewall_problem`
says why not, in one line, where they are missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

IPTABLES = "iptables"


def firewall_problem() -> str | None:
    """Why host rules cannot be set here (one line), or None."""
    if os.geteuid() != 0:
        return "not root: the host's services stay reachable from the seats' network"
    if shutil.which(IPTABLES) is None:
        return "no iptables on this host: the host's services stay reachable from the seats"
    return None


@dataclass(frozen=True)
class HostFirewall:
    """From ``bridge``, only TCP to ``address``:``port`` reaches the host."""

    bridge: str
    address: str
    port: int
    comment: str

    def rules(self) -> list[list[str]]:
        mark = ["-m", "comment", "--comment", self.comment]
        return [
            ["-i", self.bridge, "-p", "tcp", "-d", self.address, "--dport", str(self.port),
             *mark, "-j", "ACCEPT"],
            ["-i", self.bridge, *mark, "-j", "DROP"],
        ]  # fmt: skip

    def apply(self) -> None:
        """Insert the rules at the top of ``INPUT`` (the ACCEPT above the DROP).

        Raises:
            RuntimeError: iptables refused (its message).
        """
        self.remove()
        accept, drop = self.rules()
        for rule in (drop, accept):  # each goes to position 1: the accept ends up first
            _iptables(["-I", "INPUT", "1", *rule])

    def remove(self) -> None:
        """Delete every copy of the rules (a killed run may have left some)."""
        for rule in self.rules():
            for _ in range(20):
                try:
                    _iptables(["-D", "INPUT", *rule])
                except RuntimeError:
                    break


def _iptables(args: list[str]) -> None:
    done = subprocess.run(
        [IPTABLES, "-w", "10", *args], capture_output=True, text=True, timeout=30
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args)}: {done.stderr.strip()}")
