"""Vendor APIs, one module each (``anthropic``, ``openai``, ``gemini``), registered by name.

Each owns its model routes, the tools the vendor runs itself, its auth header, its billing
headers, its wire-usage parser and its in-stream error detection
(:class:`~agents.apis.base.VendorApi`). The model proxy (:mod:`isolation.model_proxy`) and
:mod:`analysis.wire_usage` dispatch through :func:`get_api`.
"""

from agents.apis.base import VendorApi, response_objects
from agents.apis.registry import api_names, get_api, vendor_api

__all__ = ["VendorApi", "api_names", "get_api", "response_objects", "vendor_api"]
