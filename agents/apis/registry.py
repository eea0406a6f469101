"""The name-keyed registry of vendor APIs, imported lazily (one module per bundled name).

Adding a vendor API: one module defining a :class:`~agents.apis.base.VendorApi` subclass under
``@vendor_api("name")``, its entry in :data:`_BUNDLED`, and its tests.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

from agents.apis.base import VendorApi

_BUNDLED = {
    "anthropic": "agents.apis.anthropic",
    "gemini": "agents.apis.gemini",
    "openai": "agents.apis.openai",
}
_APIS: dict[str, type[VendorApi]] = {}
T = TypeVar("T", bound=type[VendorApi])


def vendor_api(name: str) -> Callable[[T], T]:
    """Class decorator: register a vendor API under ``name``."""

    def register(cls: T) -> T:
        cls.name = name
        _APIS[name] = cls
        return cls

    return register


def api_names() -> list[str]:
    """Every API that can be asked for by name."""
    return sorted({*_BUNDLED, *_APIS})


def get_api(name: str) -> VendorApi:
    """The API registered as ``name``.

    Raises:
        ValueError: no such API (the message lists the known ones).
    """
    if name not in _APIS and name in _BUNDLED:
        importlib.import_module(_BUNDLED[name])
    if name not in _APIS:
        raise ValueError(f"no vendor API named {name!r}; known: {', '.join(api_names())}")
    return _APIS[name]()
