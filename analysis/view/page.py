"""The view's one HTML page: the template with its script and style inlined, and, for an
export, the data too (one self-contained file that opens with the network off)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["embed_json", "render"]


@cache
def _static(name: str) -> str:
    return resources.files("analysis.view").joinpath("static", name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON safe inside a ``<script type="application/json">`` element.

    ``<`` is written ``\\u003c`` so no text of the run (an agent's message is an adversary's)
    can close the element, and ``://`` as ``:\\/\\/`` so the file names no address a reader
    might take for a network reference; both parse back to the same strings.
    """
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace("://", ":\\/\\/")


def render(data: dict[str, Any] | None) -> str:
    """The page: live (``data`` None: it polls the server's endpoints) or exported (``data``
    holds every section and the evaluations' details, read once)."""
    html = _static("view.html")
    payload = "null" if data is None else embed_json(data)
    # Replaced last-first so a placeholder's text inside the script or style is never touched.
    return (
        html.replace("/*@STYLE@*/", _static("view.css"))
        .replace("/*@SCRIPT@*/", _static("view.js"))
        .replace("@DATA@", payload)
    )
