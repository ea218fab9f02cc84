-- table: stg_events
-- grain: one row per event of the traces being analysed (a temporary table of the run, never kept in the warehouse)
-- reads: (lake) read_parquet($event_files)
-- materialize: temp
-- description: The lake's events of the selected traces, with the columns the analyses use, an end time and a run-local event id.
-- column: event_id: run-local row id used for joins inside one run: trace_key x 2^40 + the event's row in its file, so it is stable for the same run inputs and computed in parallel
-- column: trace_id: trace key (sha256 of the source file)
-- column: trace_key: run-local integer key of the trace: its events file's place in the run's list (one file per trace), for partitions and joins that need not carry the 64-character trace_id
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
-- column: op_name: the dispatcher-op name of a framework op or NVTX range named like one (METHOD.md section 1: exactly ns::op or ns::op.overload, ns starting with a lowercase letter or '_'; NVTX: the range text before its first comma), NULL for every other event. The one place the dispatcher-op rule is applied: op linking on every route, the host partition and the start of IL read it
-- column: is_dispatcher_op: op_name IS NOT NULL
-- column: host_call_class: class of a host API call: 'launch' (kernel or graph launch), 'library' (cuBLAS/cuDNN range), 'sync' (*Synchronize*), 'other_runtime' (any other runtime or driver call); NULL for other events. The one place these predicates are written
SELECT
    source_file_index * 1099511627776 + file_row_number::BIGINT AS event_id,
    trace_id,
    source_file_index AS trace_key,
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
    graph_id,
    op_name,
    op_name IS NOT NULL AS is_dispatcher_op,
    CASE
        WHEN kind = 'graph_launch' THEN 'launch'
        WHEN kind = 'library_api' OR (kind IN ('runtime_api', 'driver_api') AND (name ILIKE 'cublas%' OR name ILIKE 'cudnn%'))
            THEN 'library'
        WHEN kind IN ('runtime_api', 'driver_api')
             AND regexp_matches(name, '(?i)(launchkernel|launchcooperativekernel|^culaunch|^hiplaunch|modulelaunch|graphlaunch)')
            THEN 'launch'
        WHEN kind IN ('runtime_api', 'driver_api') AND name ILIKE '%synchronize%' THEN 'sync'
        WHEN kind IN ('runtime_api', 'driver_api') THEN 'other_runtime'
    END AS host_call_class
FROM (
    SELECT
        *,
        file_index::BIGINT AS source_file_index,
        CASE
            WHEN kind = 'framework_op'
                 AND regexp_full_match(name, '[a-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?')
                THEN name
            WHEN kind = 'nvtx_range'
                 AND regexp_full_match(trim(split_part(name, ',', 1)),
                                       '[a-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?')
                THEN trim(split_part(name, ',', 1))
        END AS op_name
    FROM read_parquet($event_files, union_by_name = true, file_row_number = true)
    WHERE kind NOT IN ('metadata', 'flow', 'instant', 'nvtx_mark', 'other')
)
