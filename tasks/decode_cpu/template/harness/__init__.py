"""Frozen harness: speaks the engine protocol for the Python engine in `engine/`."""
