-- table: int_busy_intervals
-- grain: one row per merged busy interval of a set of device events: per GPU (busy_set 'device': its kernels, memcpys and memsets on every stream; busy_set 'gpu_kernels': its kernels on every stream) and per trace (busy_set 'kernels': its kernels on every GPU and stream)
-- reads: stg_events
-- materialize: temp
-- description: The one interval union of device work (METHOD.md section 3 and section 6): a set's events ordered by start; an interval starts where an event begins after every earlier event of its set ended, and ends at the latest end of its events (events that touch, end = next start, share an interval). device_idle_gaps (and so device_busy) read the 'device' set, skip_by_trace's merged kernel busy time the 'kernels' set, diagnosis' kernel busy islands per GPU the 'gpu_kernels' set. Intervals of a set are disjoint; a run-local table, never kept in the warehouse.
-- column: trace_id: trace key
-- column: busy_set: 'device' (kernels, memcpys, memsets of one GPU), 'gpu_kernels' (kernels of one GPU) or 'kernels' (kernels of the trace, every GPU)
-- column: device_id: GPU index in the 'device' and 'gpu_kernels' sets; NULL in the 'kernels' set
-- column: busy_start_ns: interval start, the start of its first event (ns)
-- column: busy_end_ns: interval end, the latest end of its events (ns)
-- column: first_event_id: run-local event_id of the event that starts the interval (earliest start, then lowest event_id)
WITH
ev AS (
    SELECT event_id, trace_id, 'device' AS busy_set, device_id, ts_ns, end_ns
    FROM stg_events WHERE kind IN ('kernel', 'memcpy', 'memset') AND device_id IS NOT NULL
    UNION ALL
    SELECT event_id, trace_id, 'gpu_kernels' AS busy_set, device_id, ts_ns, end_ns
    FROM stg_events WHERE kind = 'kernel' AND device_id IS NOT NULL
    UNION ALL
    SELECT event_id, trace_id, 'kernels' AS busy_set, NULL AS device_id, ts_ns, end_ns
    FROM stg_events WHERE kind = 'kernel'
),
-- one compact key per set; the ordered passes below carry it instead of the trace id text
keyed AS (
    SELECT event_id, hash(trace_id, busy_set, device_id) AS pk, ts_ns, end_ns FROM ev
),
-- one ordered pass per set: a new interval starts at the set's first event and where an event begins after every
-- earlier event of its set ended; the running count of starts numbers the intervals within the set
o AS (
    SELECT *,
        max(end_ns) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max_end,
        row_number() OVER w AS rn
    FROM keyed
    WINDOW w AS (PARTITION BY pk ORDER BY ts_ns, end_ns, event_id)
),
g AS (
    SELECT pk, ts_ns, end_ns, event_id,
        sum(CASE WHEN rn = 1 OR ts_ns > prev_max_end THEN 1 ELSE 0 END) OVER (
            PARTITION BY pk ORDER BY ts_ns, end_ns, event_id ROWS UNBOUNDED PRECEDING
        ) AS grp
    FROM o
),
-- the first event (earliest start, then lowest event_id): the least ts_ns x 2^64 + event_id (event ids are >= 0 and
-- < 2^64), minus its start's part; one HUGEINT min is cheaper than arg_min over a (ts_ns, event_id) struct
busy AS (
    SELECT pk, min(ts_ns) AS busy_start_ns, max(end_ns) AS busy_end_ns,
           CAST(min(ts_ns::HUGEINT * 18446744073709551616 + event_id)
                - min(ts_ns)::HUGEINT * 18446744073709551616 AS BIGINT) AS first_event_id
    FROM g GROUP BY pk, grp
),
sets AS (
    SELECT DISTINCT hash(trace_id, busy_set, device_id) AS pk, trace_id, busy_set, device_id FROM ev
)
SELECT s.trace_id, s.busy_set, s.device_id, b.busy_start_ns, b.busy_end_ns, b.first_event_id
FROM busy b JOIN sets s USING (pk)
