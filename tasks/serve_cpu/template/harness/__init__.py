"""The frozen harness: the weights, the HTTP front and the local check (never edit)."""
