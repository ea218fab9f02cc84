"""The common event schema (version 1): one Arrow schema for events from every source.

Every field carries ``unit`` and ``description`` metadata; the Parquet files written with it carry
``taxbreak.schema.name`` and ``taxbreak.schema.version`` in their key/value metadata.  Times are
int64 nanoseconds relative to the trace start; the absolute epoch of the trace start lives in the
trace catalogue (``start_epoch_ns``).  See ``schemas/CHANGELOG.md`` for the version history.
"""

from __future__ import annotations

import pyarrow as pa

EVENT_SCHEMA_NAME = "taxbreak.events"
CATALOGUE_SCHEMA_NAME = "taxbreak.catalogue"
SCHEMA_VERSION = "1.2.0"
SCHEMA_MAJOR = 1

# Event kinds shared by every adapter.  Adapters map their source categories onto these.
EVENT_KINDS: tuple[str, ...] = (
    "framework_op",  # dispatcher / framework operator (aten::mm, vllm::..., Kineto cpu_op)
    "python_function",  # Python-level frame (Kineto python_function)
    "user_annotation",  # record_function / ProfilerStep#N and other user ranges on the host
    "gpu_annotation",  # user annotation projected onto a GPU stream (Kineto gpu_user_annotation)
    "runtime_api",  # CUDA/HIP runtime API call
    "driver_api",  # CUDA driver API call
    "library_api",  # cuBLAS / cuDNN API range
    "graph_launch",  # cudaGraphLaunch / hipGraphLaunch host call (also a runtime call)
    "kernel",  # GPU kernel execution
    "memcpy",  # GPU memcpy
    "memset",  # GPU memset
    "sync",  # synchronisation event (Kineto cuda_sync, CUPTI synchronization)
    "nvtx_range",  # NVTX push/pop or start/end range
    "nvtx_mark",  # NVTX instantaneous marker
    "profiler_range",  # CUPTI range-profiler range (Kineto cuda_profiler_range)
    "os_runtime",  # OS runtime call (Nsight OSRT_API)
    "flow",  # flow event linking two events (Kineto ac2g, fwdbwd, async_cpu_to_gpu)
    "instant",  # instant event
    "metadata",  # metadata event (Kineto ph=M: process/thread names and sort indices)
    "other",  # anything else the source holds (kept, never dropped)
)
# Host calls that launch device work: a device event joins its launch on (pid, correlation_id).
LAUNCH_KINDS: tuple[str, ...] = ("runtime_api", "driver_api", "graph_launch")


def _f(name: str, typ: pa.DataType, unit: str, description: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable, metadata={"unit": unit, "description": description})


EVENT_FIELDS: list[pa.Field] = [
    _f("trace_id", pa.string(), "", "Content hash (sha256 hex) of the source file; the trace's key.", False),
    _f("source_format", pa.string(), "", "Adapter that produced the row: 'kineto' or 'nsys-sqlite'.", False),
    _f("kind", pa.string(), "", "Event kind, one of schemas.events.EVENT_KINDS.", False),
    _f("category", pa.string(), "", "The source's own category (Kineto 'cat', Nsight table name)."),
    _f("phase", pa.string(), "", "Chrome-trace phase letter (X, i, s, f, M, ...) or NULL."),
    _f("name", pa.string(), "", "Event name; runtime names without version suffix (cudaLaunchKernel)."),
    _f("raw_name", pa.string(), "",
       "Name exactly as in the source when it differs from 'name' (a versioned runtime call such as "
       "cudaLaunchKernel_v7000; an Nsight kernel's mangled symbol), else NULL."),
    _f("short_name", pa.string(), "", "Short (undecorated) kernel name when the source has one."),
    _f("ts_ns", pa.int64(), "ns", "Start time, nanoseconds since the trace start (catalogue start_epoch_ns)."),
    _f("dur_ns", pa.int64(), "ns", "Duration in nanoseconds; NULL for instants, flows and metadata."),
    _f("pid", pa.string(), "", "Process id as text (Kineto mixes ints and strings)."),
    _f("tid", pa.string(), "", "Thread id as text; for GPU events the source's stream/lane id."),
    _f("device_id", pa.int32(), "", "GPU device index for device-side events."),
    _f("stream_id", pa.int64(), "", "GPU stream id for device-side events."),
    _f("correlation_id", pa.int64(), "", "Launch correlation id; unique only together with pid."),
    _f("external_id", pa.int64(), "", "Kineto External id linking host ops, launches and kernels."),
    _f("flow_id", pa.int64(), "", "Flow id for flow events (Kineto 'id')."),
    _f("grid_x", pa.int64(), "blocks", "Kernel grid size, x."),
    _f("grid_y", pa.int64(), "blocks", "Kernel grid size, y."),
    _f("grid_z", pa.int64(), "blocks", "Kernel grid size, z."),
    _f("block_x", pa.int64(), "threads", "Kernel block size, x."),
    _f("block_y", pa.int64(), "threads", "Kernel block size, y."),
    _f("block_z", pa.int64(), "threads", "Kernel block size, z."),
    _f("registers_per_thread", pa.int64(), "registers", "Registers per thread of a kernel."),
    _f("shared_memory_bytes", pa.int64(), "bytes", "Static + dynamic shared memory of a kernel."),
    _f("bytes", pa.int64(), "bytes", "Bytes moved by a memcpy or set by a memset."),
    _f("copy_kind", pa.string(), "", "Memcpy/memset kind (HtoD, DtoH, DtoD, ...)."),
    _f("graph_id", pa.int64(), "", "CUDA graph id of a kernel launched by a graph (Nsight graphId)."),
    _f("graph_node_id", pa.int64(), "", "CUDA graph node id of a graph-launched kernel."),
    _f("domain", pa.string(), "", "NVTX domain name, or NULL for the default domain."),
    _f("end_tid", pa.string(), "", "Thread that ended an NVTX start/end range when not the starting one."),
    _f("args_json", pa.string(), "json", "The source's remaining arguments as a JSON object (lossless)."),
]

EVENT_SCHEMA = pa.schema(
    EVENT_FIELDS,
    metadata={"taxbreak.schema.name": EVENT_SCHEMA_NAME, "taxbreak.schema.version": SCHEMA_VERSION},
)

CATALOGUE_FIELDS: list[pa.Field] = [
    _f("trace_id", pa.string(), "", "Content hash (sha256 hex) of the source file.", False),
    _f("file_name", pa.string(), "", "Original file name (basename).", False),
    _f("source_path", pa.string(), "", "Path or URL the file was read from."),
    _f("file_bytes", pa.int64(), "bytes", "Size of the source file on disk."),
    _f("source_format", pa.string(), "", "'kineto', 'nsys-sqlite' or 'nsys-rep' (NULL if unrecognised)."),
    _f("tool_versions_json", pa.string(), "json", "Versions of the tools that wrote the trace."),
    _f("gpu_names_json", pa.string(), "json", "JSON list of GPU model names, one per device."),
    _f("gpu_count", pa.int32(), "devices", "GPUs the host describes (its device list), ran kernels or not."),
    _f("kernel_gpu_count", pa.int32(), "devices",
       "GPUs that ran kernels in the trace (distinct device ids of kernel events); NULL in catalogues before 1.2."),
    _f("host_name", pa.string(), "", "Host name, when the trace records it."),
    _f("start_epoch_ns", pa.int64(), "ns", "Absolute time of ts_ns = 0, ns since the Unix epoch, when known."),
    _f("duration_ns", pa.int64(), "ns", "Span from the first to the last event end."),
    _f("event_count", pa.int64(), "events", "Events stored in the lake for this trace."),
    _f("event_counts_json", pa.string(), "json", "Stored events per kind, JSON object."),
    _f("skipped_counts_json", pa.string(), "json", "Source events not stored, per reason, JSON object."),
    _f("source_event_count", pa.int64(), "events", "Events in the source file (stored + skipped)."),
    _f("metadata_json", pa.string(), "json", "Source-level metadata (Kineto top-level keys, Nsight META_DATA_*)."),
    _f("ingested_at_ns", pa.int64(), "ns", "When the ingest finished, ns since the Unix epoch.", False),
    _f("schema_version", pa.string(), "", "Event schema version the trace was written with.", False),
    _f("status", pa.string(), "", "'ingested', 'failed', or 'not_a_trace' (no trace at all: never analysed "
       "nor retried).", False),
    _f("error", pa.string(), "", "Why the ingest failed (names the file and the problem), else NULL."),
]

CATALOGUE_SCHEMA = pa.schema(
    CATALOGUE_FIELDS,
    metadata={"taxbreak.schema.name": CATALOGUE_SCHEMA_NAME, "taxbreak.schema.version": SCHEMA_VERSION},
)


class SchemaVersionError(ValueError):
    """A file was written with a schema major version this release cannot read."""


def check_schema_version(metadata: dict[bytes, bytes] | None, where: str) -> str:
    """Return the schema version in Parquet key/value metadata, refusing unknown major versions."""
    meta = metadata or {}
    raw = meta.get(b"taxbreak.schema.version")
    if raw is None:
        raise SchemaVersionError(f"{where}: no taxbreak.schema.version in the Parquet metadata; not a taxbreak file")
    version = raw.decode()
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise SchemaVersionError(f"{where}: unreadable schema version {version!r}") from None
    if major != SCHEMA_MAJOR:
        raise SchemaVersionError(
            f"{where}: written with taxbreak event schema {version}, this release reads major version "
            f"{SCHEMA_MAJOR} only; upgrade taxbreak or re-ingest the source trace"
        )
    return version


def field_docs(schema: pa.Schema) -> list[tuple[str, str, str, str]]:
    """(name, arrow type, unit, description) for every field: the source of the column docs."""
    out = []
    for fld in schema:
        md = fld.metadata or {}
        out.append((fld.name, str(fld.type), md.get(b"unit", b"").decode(), md.get(b"description", b"").decode()))
    return out
