"""taxbreak: where the host-side time of GPU LLM inference goes.

Subpackages: ``taxbreak.schemas`` (the common event schema), ``taxbreak.ingest`` (one adapter per
input format, writing the Parquet lake), ``taxbreak.sql`` (DuckDB SQL of the analyses),
``taxbreak.pipeline`` (Dagster wiring) and ``taxbreak.capture`` (torch capture tools).
"""

__version__ = "0.1.0"
