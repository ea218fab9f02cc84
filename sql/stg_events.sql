-- table: stg_events
-- grain: one row per event of the traces being analysed (a temporary table of the run, never kept in the warehouse)
-- reads: (lake) read_parquet($event_files)
-- materialize: temp
-- description: The lake's events of the selected traces, with the columns the analyses use, an end time and a run-local event id.
-- column: event_id: run-local row id used for joins inside one run (not stable across runs)
-- column: trace_id: trace key (sha256 of the source file)
-- column: source_format: adapter that wrote the event ('kineto', 'nsys-sqlite', ...)
-- column: kind: event kind (schemas.events.EVENT_KINDS)
-- column: name: event name without version suffix
-- column: ts_ns: start, ns since trace start (ns)
-- column: dur_ns: duration (ns)
-- column: end_ns: ts_ns + dur_ns, ts_ns for instants (ns)
-- column: pid: process id as text; for device events the launching host process
-- column: tid: thread id as text; for device events the stream id
-- column: proc_key: hash of (trace_id, pid), a compact key for per-process joins
-- column: thread_key: hash of (trace_id, pid, tid), a compact key for per-thread sweeps
-- column: device_id: GPU index of device events
-- column: stream_id: GPU stream of device events
-- column: correlation_id: launch correlation id (unique with pid)
-- column: external_id: Kineto External id
-- column: graph_id: CUDA graph id of graph-launched kernels
SELECT
    row_number() OVER () AS event_id,
    trace_id,
    source_format,
    kind,
    name,
    ts_ns,
    dur_ns,
    ts_ns + coalesce(dur_ns, 0) AS end_ns,
    pid,
    tid,
    hash(trace_id, pid) AS proc_key,
    hash(trace_id, pid, tid) AS thread_key,
    device_id,
    stream_id,
    correlation_id,
    external_id,
    graph_id
FROM read_parquet($event_files, union_by_name = true)
WHERE kind NOT IN ('metadata', 'flow', 'instant', 'nvtx_mark', 'other')
