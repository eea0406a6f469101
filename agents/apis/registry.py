"""The name-keyed registry of vendor APIs, imported lazily (one module per bundled name).

Adding a vendor API: one module of ``agents.apis`` defining a :class:`~agents.apis.base.VendorApi`
subclass under ``@vendor_api("name")``, and its tests; the registry finds the module by that call
(:class:`registry.Registry`), with no list to edit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from agents.apis.base import VendorApi
from registry import Registry

APIS: Registry[type[VendorApi]] = Registry(
    "vendor API", "agents.apis", "vendor_api", "swarmlab.vendor_apis"
)
T = TypeVar("T", bound=type[VendorApi])


def vendor_api(name: str) -> Callable[[T], T]:
    """Class decorator: register a vendor API under ``name``."""

    def register(cls: T) -> T:
        cls.name = name
        return APIS.register(name, cls)

    return register


def api_names() -> list[str]:
    """Every API that can be asked for by name."""
    return APIS.names()


def get_api(name: str) -> VendorApi:
    """The API registered as ``name``.

    Raises:
        ValueError: no such API (the message lists the known ones).
    """
    return APIS.get(name)()
