"""A suffix unique to this test session, for the names of things the Docker engine keeps
(containers): two suites sharing one engine (a CI rehearsal beside a developer's run) must
not remove each other's containers, as a fixed name makes `Sandbox.container` do."""

from __future__ import annotations

import secrets

SESSION = secrets.token_hex(3)
