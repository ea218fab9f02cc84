-- table: device_idle_gaps
-- grain: one row per idle gap of a GPU: time between two merged busy intervals (kernels, memcpys, memsets on any stream)
-- reads: int_busy_intervals, stg_events
-- description: Device idle gaps with their cause (ours): 'sync_drain' when a host synchronisation call returned inside the gap, else 'memcpy' when the work that ends the gap is a memcpy/memset, else 'launch_late' when the kernel that ends the gap was launched (launch call start) after the gap began, else 'other' (launched in time but started late: stream dependencies, events, other processes).
-- column: trace_id: trace key
-- column: device_id: GPU index
-- column: gap_seq: 1-based position of the gap on the device
-- column: gap_start_ns: end of the previous busy interval (ns)
-- column: gap_end_ns: start of the next busy interval (ns)
-- column: gap_ns: gap length (ns)
-- column: cause: 'sync_drain', 'memcpy', 'launch_late' or 'other'
-- column: next_kind: kind of the event that ends the gap (kernel, memcpy, memset)
-- column: next_name: name of the event that ends the gap
WITH
-- the GPU's merged busy intervals (int_busy_intervals, set 'device'); a gap lies between two consecutive ones
gaps2 AS (
    SELECT b.gap_start_ns, b.busy_start_ns AS gap_end_ns, b.trace_id, b.device_id, e.kind AS next_kind,
           e.name AS next_name, e.pid AS next_pid, e.correlation_id AS next_corr
    FROM (
        SELECT trace_id, device_id, busy_start_ns, first_event_id,
               lag(busy_end_ns) OVER (PARTITION BY trace_id, device_id ORDER BY busy_start_ns) AS gap_start_ns
        FROM int_busy_intervals WHERE busy_set = 'device'
    ) b
    JOIN stg_events e ON e.event_id = b.first_event_id
    WHERE b.gap_start_ns IS NOT NULL
),
launches AS (
    SELECT trace_id, pid, correlation_id, min(ts_ns) AS launch_ts_ns
    FROM stg_events
    WHERE kind IN ('runtime_api', 'driver_api', 'graph_launch') AND correlation_id IS NOT NULL
    GROUP BY trace_id, pid, correlation_id
),
syncs AS (
    SELECT trace_id, end_ns FROM stg_events
    WHERE (kind IN ('runtime_api', 'driver_api') AND name ILIKE '%synchronize%')
),
withsync AS (
    SELECT g.*, s.end_ns AS sync_end_ns
    FROM gaps2 g ASOF LEFT JOIN syncs s ON g.trace_id = s.trace_id AND g.gap_end_ns >= s.end_ns
)
SELECT
    w.trace_id,
    w.device_id,
    row_number() OVER (PARTITION BY w.trace_id, w.device_id ORDER BY w.gap_start_ns) AS gap_seq,
    w.gap_start_ns,
    w.gap_end_ns,
    w.gap_end_ns - w.gap_start_ns AS gap_ns,
    CASE
        WHEN w.sync_end_ns IS NOT NULL AND w.sync_end_ns >= w.gap_start_ns THEN 'sync_drain'
        WHEN w.next_kind IN ('memcpy', 'memset') THEN 'memcpy'
        WHEN l.launch_ts_ns > w.gap_start_ns THEN 'launch_late'
        ELSE 'other'
    END AS cause,
    w.next_kind,
    w.next_name
FROM withsync w
LEFT JOIN launches l ON l.trace_id = w.trace_id AND l.pid = w.next_pid AND l.correlation_id = w.next_corr
