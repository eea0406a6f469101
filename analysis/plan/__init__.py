"""The planner (placeholder)."""
