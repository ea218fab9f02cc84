-- table: device_idle_gaps
-- grain: one row per idle gap of a GPU: time between two merged busy intervals (kernels, memcpys, memsets on any stream)
-- reads: int_busy_intervals, stg_events, int_traces
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
-- a trace's rows carry its run-local number (int_traces) through the ordered passes below instead of the trace id text
traces AS (SELECT trace_id, trace_key AS tk FROM int_traces),
-- the GPU's merged busy intervals (int_busy_intervals, set 'device'); a gap lies between two consecutive ones.
-- The intervals are disjoint, so the gaps follow their order and a gap's number is its closing interval's
-- (minus the first, which closes none), taken in the same ordered pass: numbering the gaps in a second window
-- over the wide gap rows ran out of DuckDB's memory_limit at 4 M kernels (one GPU: one partition).
b AS (
    SELECT t.tk, b.device_id, b.busy_start_ns, b.first_event_id,
           lag(b.busy_end_ns) OVER w AS gap_start_ns,
           row_number() OVER w - 1 AS gap_seq
    FROM int_busy_intervals b JOIN traces t USING (trace_id)
    WHERE b.busy_set = 'device'
    WINDOW w AS (PARTITION BY t.tk, b.device_id ORDER BY b.busy_start_ns)
),
gaps2 AS (
    SELECT b.tk, b.device_id, b.gap_seq, b.gap_start_ns, b.busy_start_ns AS gap_end_ns, b.first_event_id,
           e.proc_key AS next_proc_key, e.correlation_id AS next_corr, e.kind AS next_kind, e.name AS next_name
    FROM b JOIN stg_events e ON e.event_id = b.first_event_id
    WHERE b.gap_start_ns IS NOT NULL
),
-- the first launch call (earliest start) of each (process, correlation id); the gaps look theirs up.  Not narrowed
-- to the gaps' ids first: reading gaps2 twice made DuckDB hold it whole, and at 4 M kernels the statement ran out
-- of the memory_limit (the aggregate spills; the held rows did not)
launches AS (
    SELECT proc_key, correlation_id, min(ts_ns) AS launch_ts_ns
    FROM stg_events
    WHERE kind IN ('runtime_api', 'driver_api', 'graph_launch') AND correlation_id IS NOT NULL
    GROUP BY proc_key, correlation_id
),
syncs AS (
    SELECT t.tk, s.end_ns
    FROM stg_events s JOIN traces t USING (trace_id)
    WHERE (s.kind IN ('runtime_api', 'driver_api') AND s.name ILIKE '%synchronize%')
),
withsync AS (
    SELECT g.*, s.end_ns AS sync_end_ns
    FROM gaps2 g ASOF LEFT JOIN syncs s ON g.tk = s.tk AND g.gap_end_ns >= s.end_ns
),
gaps AS (
    SELECT
        w.tk,
        w.device_id,
        w.gap_seq,
        w.gap_start_ns,
        w.gap_end_ns,
        w.next_kind,
        w.next_name,
        CASE
            WHEN w.sync_end_ns IS NOT NULL AND w.sync_end_ns >= w.gap_start_ns THEN 'sync_drain'
            WHEN w.next_kind IN ('memcpy', 'memset') THEN 'memcpy'
            WHEN l.launch_ts_ns > w.gap_start_ns THEN 'launch_late'
            ELSE 'other'
        END AS cause
    FROM withsync w
    LEFT JOIN launches l ON l.proc_key = w.next_proc_key AND l.correlation_id = w.next_corr
)
SELECT
    t.trace_id,
    g.device_id,
    g.gap_seq,
    g.gap_start_ns,
    g.gap_end_ns,
    g.gap_end_ns - g.gap_start_ns AS gap_ns,
    g.cause,
    g.next_kind,
    g.next_name
FROM gaps g
JOIN traces t USING (tk)
