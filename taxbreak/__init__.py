"""taxbreak: where the host-side time of GPU LLM inference goes.

Subpackages: ``taxbreak.schemas`` (the common event schema), ``taxbreak.ingest`` (one adapter per
input format, writing the Parquet lake), ``taxbreak.sql`` (DuckDB SQL of the analyses),
``taxbreak.pipeline`` (Dagster wiring) and ``taxbreak.capture`` (torch capture tools).
"""

__version__ = "0.1.0"

# The Python API (taxbreak.api, docs/api.md), loaded on first use: `import taxbreak` stays cheap (the CLI imports
# this package on every start and needs neither pandas nor the read model for most commands).
_API = ("open", "analyze_file", "Warehouse", "Summary", "WhatIf")


def __getattr__(name: str):  # noqa: ANN202 - module attribute hook (PEP 562)
    if name in _API:
        from taxbreak import api

        return getattr(api, name)
    raise AttributeError(f"module 'taxbreak' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
