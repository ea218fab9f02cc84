-- table: device_idle_gaps
-- grain: one row per idle gap of a GPU: time between two merged busy intervals (kernels, memcpys, memsets on any stream)
-- reads: stg_events
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
dev AS (
    SELECT event_id, hash(trace_id, device_id) AS pk, ts_ns, end_ns
    FROM stg_events WHERE kind IN ('kernel', 'memcpy', 'memset') AND device_id IS NOT NULL
),
-- merged busy intervals: a new interval starts where an event begins after every earlier event of its GPU ended
o AS (
    SELECT *,
        max(end_ns) OVER w AS prev_max_end,
        lag(pk) OVER (ORDER BY pk, ts_ns, end_ns, event_id) AS prev_pk
    FROM dev
    WINDOW w AS (PARTITION BY pk ORDER BY ts_ns, end_ns, event_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
g AS (
    SELECT pk, ts_ns, end_ns, event_id,
        sum(CASE WHEN prev_pk IS DISTINCT FROM pk OR ts_ns > prev_max_end THEN 1 ELSE 0 END) OVER (
            ORDER BY pk, ts_ns, end_ns, event_id ROWS UNBOUNDED PRECEDING
        ) AS grp
    FROM o
),
busy AS (
    SELECT pk, grp, min(ts_ns) AS busy_start_ns, max(end_ns) AS busy_end_ns,
           arg_min(event_id, (ts_ns, event_id)) AS first_event_id
    FROM g GROUP BY pk, grp
),
gaps AS (
    SELECT
        pk, first_event_id,
        lag(busy_end_ns) OVER (ORDER BY grp) AS gap_start_ns,
        lag(pk) OVER (ORDER BY grp) AS prev_pk,
        busy_start_ns AS gap_end_ns
    FROM busy
),
gaps2 AS (
    SELECT g.gap_start_ns, g.gap_end_ns, e.trace_id, e.device_id, e.kind AS next_kind, e.name AS next_name,
           e.pid AS next_pid, e.correlation_id AS next_corr
    FROM gaps g JOIN stg_events e ON e.event_id = g.first_event_id
    WHERE g.prev_pk = g.pk
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
