"""features layer: see docs/architecture.md."""
