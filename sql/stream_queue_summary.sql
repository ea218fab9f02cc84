-- table: stream_queue_summary
-- grain: one row per GPU stream of a trace that ran a launched kernel
-- reads: stream_queue_length, int_kernel_links
-- description: Per stream, the queue of stream_queue_length summed up (ours; docs/method.md section 6): its largest length, its time-weighted mean over the stream's queue span (first enqueue to last kernel end) and the time at least one kernel waited or ran.
-- column: trace_id: trace key
-- column: device_id: GPU index
-- column: stream_id: GPU stream
-- column: kernels_queued: kernels with a launch call on the stream (kernels)
-- column: queue_span_ns: first enqueue to last kernel end (ns)
-- column: max_queue_length: largest queue length (kernels)
-- column: mean_queue_length: time-weighted mean queue length over queue_span_ns (kernels)
-- column: nonempty_ns: time the queue held at least one kernel (ns)
WITH
q AS (
    SELECT trace_id, device_id, stream_id, min(ts_ns) AS first_ns, max(ts_ns) AS last_ns,
           max(queue_length) AS max_queue_length,
           sum(queue_length * held_ns) AS length_time,
           sum(held_ns) FILTER (WHERE queue_length > 0) AS nonempty_ns
    FROM stream_queue_length GROUP BY trace_id, device_id, stream_id
),
k AS (
    SELECT trace_id, device_id, stream_id, count(*) AS kernels_queued
    FROM int_kernel_links WHERE launch_ts_ns IS NOT NULL GROUP BY trace_id, device_id, stream_id
)
SELECT
    q.trace_id,
    q.device_id,
    q.stream_id,
    k.kernels_queued,
    q.last_ns - q.first_ns AS queue_span_ns,
    q.max_queue_length,
    CAST(q.length_time AS DOUBLE) / nullif(q.last_ns - q.first_ns, 0) AS mean_queue_length,
    CAST(coalesce(q.nonempty_ns, 0) AS BIGINT) AS nonempty_ns
FROM q JOIN k USING (trace_id, device_id, stream_id)
