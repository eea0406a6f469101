"""Test support: doubles of the vendors' servers (``tests.support.endpoints``), kept out of the
product's packages (nothing under ``agents/``, ``runner/`` ... imports them)."""
