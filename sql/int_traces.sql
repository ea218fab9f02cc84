-- table: int_traces
-- grain: one row per trace of the run
-- reads: (parameter) $trace_ids
-- materialize: temp
-- description: The run's one small integer key of a trace (ours). Ordered passes, partitions and joins over many rows carry trace_key instead of the 64-character trace_id: device_idle_gaps, stream_queue_length, gpu_time_breakdown, kernel_taxbreak, fusion_candidates and diagnosis join this table for it, and stg_events.trace_key is the same number (a trace's place in the run's list of traces, which is the order of its events files, $event_files). A run-local table, never kept in the warehouse: the number holds within one run only.
-- column: trace_key: 0-based place of the trace in the run's list: stg_events.trace_key of its events
-- column: trace_id: trace key
SELECT CAST(i AS BIGINT) AS trace_key, list_extract($trace_ids, i + 1) AS trace_id
FROM range(len($trace_ids)) r(i)
