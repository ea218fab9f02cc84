"""Schemas of the taxbreak lake: the common event schema and the trace catalogue."""

from taxbreak.schemas.events import (
    CATALOGUE_SCHEMA,
    EVENT_KINDS,
    EVENT_SCHEMA,
    LAUNCH_KINDS,
    SCHEMA_MAJOR,
    SCHEMA_VERSION,
    SchemaVersionError,
    check_schema_version,
)

__all__ = [
    "CATALOGUE_SCHEMA",
    "EVENT_KINDS",
    "EVENT_SCHEMA",
    "LAUNCH_KINDS",
    "SCHEMA_MAJOR",
    "SCHEMA_VERSION",
    "SchemaVersionError",
    "check_schema_version",
]
