-- table: device_busy
-- grain: one row per GPU of a trace
-- reads: stg_events, device_idle_gaps
-- description: Device busy and idle time per GPU (METHOD.md section 3): span from the first device event's start to the last one's end, merged busy time (kernels, memcpys, memsets on all streams), idle time split by gap cause. busy_ns + idle_ns = span_ns.
-- column: trace_id: trace key
-- column: device_id: GPU index
-- column: first_start_ns: first device event start (ns)
-- column: last_end_ns: last device event end (ns)
-- column: span_ns: last_end_ns - first_start_ns (ns)
-- column: busy_ns: merged busy time (ns)
-- column: idle_ns: span_ns - busy_ns, the sum of the idle gaps (ns)
-- column: kernels: kernels on the device (kernels)
-- column: kernel_sum_ns: sum of kernel durations, overlaps counted twice (ns)
-- column: gaps: idle gaps (gaps)
-- column: idle_launch_late_ns: idle time in gaps caused by late launches (ns)
-- column: idle_sync_drain_ns: idle time in gaps caused by host synchronisation (ns)
-- column: idle_memcpy_ns: idle time in gaps ended by a memcpy/memset (ns)
-- column: idle_other_ns: idle time in other gaps (ns)
WITH
dev AS (
    SELECT trace_id, device_id, min(ts_ns) AS first_start_ns, max(end_ns) AS last_end_ns,
           count(*) FILTER (WHERE kind = 'kernel') AS kernels,
           coalesce(sum(dur_ns) FILTER (WHERE kind = 'kernel'), 0) AS kernel_sum_ns
    FROM stg_events WHERE kind IN ('kernel', 'memcpy', 'memset') AND device_id IS NOT NULL
    GROUP BY trace_id, device_id
),
gp AS (
    SELECT trace_id, device_id, count(*) AS gaps, sum(gap_ns) AS idle_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'launch_late'), 0) AS idle_launch_late_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'sync_drain'), 0) AS idle_sync_drain_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'memcpy'), 0) AS idle_memcpy_ns,
           coalesce(sum(gap_ns) FILTER (WHERE cause = 'other'), 0) AS idle_other_ns
    FROM device_idle_gaps GROUP BY trace_id, device_id
)
SELECT
    d.trace_id,
    d.device_id,
    d.first_start_ns,
    d.last_end_ns,
    d.last_end_ns - d.first_start_ns AS span_ns,
    CAST(d.last_end_ns - d.first_start_ns - coalesce(g.idle_ns, 0) AS BIGINT) AS busy_ns,
    CAST(coalesce(g.idle_ns, 0) AS BIGINT) AS idle_ns,
    d.kernels,
    CAST(d.kernel_sum_ns AS BIGINT) AS kernel_sum_ns,
    coalesce(g.gaps, 0) AS gaps,
    CAST(coalesce(g.idle_launch_late_ns, 0) AS BIGINT) AS idle_launch_late_ns,
    CAST(coalesce(g.idle_sync_drain_ns, 0) AS BIGINT) AS idle_sync_drain_ns,
    CAST(coalesce(g.idle_memcpy_ns, 0) AS BIGINT) AS idle_memcpy_ns,
    CAST(coalesce(g.idle_other_ns, 0) AS BIGINT) AS idle_other_ns
FROM dev d LEFT JOIN gp g USING (trace_id, device_id)
