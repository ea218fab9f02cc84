-- table: stream_queue_length
-- grain: one row per change of a GPU stream's queue length: a time at which kernels were enqueued on the stream or ended
-- reads: int_kernel_links, int_traces
-- description: The queue of each GPU stream over time, like HTA's queue-length view (ours; docs/method.md section 6): a kernel is queued from its launch call's start (the earlier of that and its own start, so clock skew cannot make a queue negative) until it ends. Kernels without a launch call (orphans) have no known enqueue time and are left out. queue_length is the number of kernels launched and not yet ended after the change, held for held_ns until the stream's next change (0 at its last).
-- column: trace_id: trace key
-- column: device_id: GPU index
-- column: stream_id: GPU stream
-- column: ts_ns: time of the change (ns)
-- column: queue_length: kernels launched and not yet ended after the change (kernels)
-- column: held_ns: time until the stream's next change (ns)
WITH
-- a stream's rows carry its trace's run-local number (int_traces) through the sweep instead of the trace id text
traces AS (SELECT trace_id, trace_key AS tk FROM int_traces),
k AS (
    SELECT t.tk, k.device_id, k.stream_id, least(k.launch_ts_ns, k.kernel_ts_ns) AS enq_ns, k.kernel_end_ns
    FROM int_kernel_links k JOIN traces t USING (trace_id)
    WHERE k.launch_ts_ns IS NOT NULL
),
pts AS (
    SELECT tk, device_id, stream_id, enq_ns AS t, 1 AS d FROM k
    UNION ALL
    SELECT tk, device_id, stream_id, kernel_end_ns AS t, -1 AS d FROM k
),
-- the running sum takes a time's peers (RANGE), so the points at one time agree; the last of them (the one whose next
-- point is later) is the change
q AS (
    SELECT tk, device_id, stream_id, ts_ns, queue_length, coalesce(next_t, ts_ns) - ts_ns AS held_ns
    FROM (
        SELECT
            tk,
            device_id,
            stream_id,
            t AS ts_ns,
            CAST(sum(d) OVER (PARTITION BY tk, device_id, stream_id ORDER BY t RANGE UNBOUNDED PRECEDING) AS BIGINT)
                AS queue_length,
            lead(t) OVER (PARTITION BY tk, device_id, stream_id ORDER BY t) AS next_t
        FROM pts
    )
    WHERE next_t IS NULL OR next_t > ts_ns
)
SELECT t.trace_id, q.device_id, q.stream_id, q.ts_ns, q.queue_length, q.held_ns
FROM q JOIN traces t USING (tk)
