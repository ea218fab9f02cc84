"""engine layer: see docs/architecture.md."""
