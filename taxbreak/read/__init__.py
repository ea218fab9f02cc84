"""read layer: see docs/architecture.md."""
