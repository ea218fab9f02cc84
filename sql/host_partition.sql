-- table: host_partition
-- grain: one row per host thread (scope_kind 'thread'), one per trace (scope_kind 'trace', the sum over its threads) and one per step (scope_kind 'step', on the step annotation's thread)
-- reads: stg_events, int_steps
-- description: The exact host-time partition (METHOD.md section 3, ours): a thread's wall time, from its first traced host event's start to its last one's end, split by nesting into disjoint self times of the innermost open event; the parts add up to wall_ns exactly. User annotations (ProfilerStep#N, record_function wrappers) are not parts: time under them and under no other event is host_untraced_ns. Per step (int_steps) the same parts of the annotation's thread, clipped to the step window [step_ts_ns, step_end_ns): wall_ns is the step's duration, and window time outside the thread's traced span is host_untraced_ns too.
-- column: trace_id: trace key
-- column: scope_kind: 'thread', 'trace' or 'step'
-- column: pid: host process ('thread' and 'step' rows)
-- column: tid: host thread ('thread' and 'step' rows)
-- column: step_id: int_steps.step_id ('step' rows)
-- column: wall_ns: first event start to last event end per thread; summed over threads for 'trace'; the step's duration for 'step' (ns)
-- column: launch_host_ns: self time inside launch calls (runtime and driver kernel launches, graph launches) (ns)
-- column: library_ns: self time inside cuBLAS/cuDNN API ranges, nested launches excluded (ns)
-- column: framework_ns: self time inside framework ops, NVTX op ranges and Python functions (ns)
-- column: sync_ns: self time inside synchronisation calls (*Synchronize*) (ns)
-- column: other_runtime_ns: self time inside other CUDA/HIP API calls (memcpy, malloc, event record, ...) (ns)
-- column: host_untraced_ns: time inside the scope covered by no traced event (ns)
-- column: unresolved_ns: time where the events are not properly nested and the innermost event is ambiguous (ns)
WITH
iv AS (
    SELECT
        event_id, thread_key AS pk, ts_ns, end_ns,
        CASE
            WHEN kind = 'graph_launch' THEN 1
            WHEN kind = 'library_api' OR name ILIKE 'cublas%' OR name ILIKE 'cudnn%' THEN 2
            WHEN kind IN ('runtime_api', 'driver_api')
                 AND regexp_matches(name, '(?i)(launchkernel|launchcooperativekernel|^culaunch|^hiplaunch|modulelaunch|graphlaunch)')
                THEN 1
            WHEN kind IN ('runtime_api', 'driver_api') AND name ILIKE '%synchronize%' THEN 4
            WHEN kind IN ('runtime_api', 'driver_api') THEN 5
            ELSE 3
        END AS category
    FROM stg_events
    WHERE dur_ns > 0 AND (
        kind IN ('runtime_api', 'driver_api', 'graph_launch', 'library_api', 'framework_op', 'python_function')
        OR (kind = 'nvtx_range' AND regexp_matches(name, '^[A-Za-z_][A-Za-z0-9_.]*::[A-Za-z_]'))
    )
),
threads AS (
    SELECT DISTINCT thread_key AS pk, trace_id, pid, tid FROM stg_events WHERE thread_key IN (SELECT pk FROM iv)
),
-- starts (+1, carrying -end in ord2 and the category) and ends (-1) of every range, one running sum ordered by
-- (thread, time): each range nets 0, so the sum is the thread's nesting depth (see int_kernel_links).
b AS (
    SELECT pk, ts_ns AS t, 1 AS ord, -end_ns AS ord2, 1 AS delta, event_id, category FROM iv
    UNION ALL
    SELECT pk, end_ns, 0, -ts_ns, -1, event_id, 0 FROM iv
),
d AS (
    SELECT
        pk, t, ord, ord2, category,
        sum(delta) OVER w AS depth,
        lead(t) OVER w AS next_t,
        lead(pk) OVER w AS next_pk
    FROM b
    WINDOW w AS (ORDER BY pk, t, ord, ord2, event_id ROWS UNBOUNDED PRECEDING)
),
starts AS (
    SELECT pk, depth, t AS ts_ns, -ord2 AS end_ns, category FROM d WHERE ord = 1
),
seg AS (
    SELECT pk, t, next_t - t AS seg_ns, depth, ord, category, -ord2 AS end_ns FROM d WHERE next_pk = pk AND next_t > t
),
-- a segment that begins at a range's start belongs to that range (it is the innermost); one that begins at an end
-- belongs to the range still open at its depth, found by ASOF
labelled AS (
    SELECT pk, t, seg_ns, CASE WHEN depth = 0 THEN 6 WHEN end_ns > t THEN category ELSE 7 END AS category
    FROM seg WHERE ord = 1
    UNION ALL
    SELECT
        s.pk, s.t, s.seg_ns,
        CASE
            WHEN s.depth = 0 THEN 6
            WHEN st.end_ns IS NOT NULL AND st.end_ns > s.t THEN st.category
            ELSE 7
        END AS category
    FROM (SELECT * FROM seg WHERE ord = 0) s
    ASOF LEFT JOIN starts st ON s.pk = st.pk AND s.depth = st.depth AND s.t >= st.ts_ns
),
per_thread AS (
    SELECT
        pk,
        sum(seg_ns) AS wall_ns,
        coalesce(sum(seg_ns) FILTER (WHERE category = 1), 0) AS launch_host_ns,
        coalesce(sum(seg_ns) FILTER (WHERE category = 2), 0) AS library_ns,
        coalesce(sum(seg_ns) FILTER (WHERE category = 3), 0) AS framework_ns,
        coalesce(sum(seg_ns) FILTER (WHERE category = 4), 0) AS sync_ns,
        coalesce(sum(seg_ns) FILTER (WHERE category = 5), 0) AS other_runtime_ns,
        coalesce(sum(seg_ns) FILTER (WHERE category = 6), 0) AS host_untraced_ns,
        coalesce(sum(seg_ns) FILTER (WHERE category = 7), 0) AS unresolved_ns
    FROM labelled GROUP BY pk
),
-- a step's window on its annotation's thread: the thread's segments clipped to it; what the clipped parts leave of
-- the window (before the thread's first event, after its last, between events) is untraced.  A segment overlapping
-- the window either starts inside it (found by ASOF per step nesting level: steps of one level do not overlap) or
-- is the one running at the step's start (found by ASOF from the step), so no segment x step cross product.
steps AS (
    SELECT s.trace_id, s.step_id, s.pid, s.tid, s.step_level, s.step_ts_ns, s.step_end_ns, s.step_dur_ns,
           hash(s.trace_id, s.pid, s.tid) AS pk
    FROM int_steps s
),
traced AS (
    SELECT pk, t, seg_ns, category FROM labelled WHERE category <> 6 AND pk IN (SELECT pk FROM steps)
),
starting AS (
    SELECT st.trace_id, st.step_id, l.category, least(l.t + l.seg_ns, st.step_end_ns) - l.t AS part_ns
    FROM (SELECT l.*, lv.step_level FROM traced l JOIN (SELECT DISTINCT pk, step_level FROM steps) lv USING (pk)) l
    ASOF JOIN steps st ON l.pk = st.pk AND l.step_level = st.step_level AND l.t >= st.step_ts_ns
    WHERE l.t < st.step_end_ns
),
straddling AS (
    SELECT st.trace_id, st.step_id, l.category, least(l.t + l.seg_ns, st.step_end_ns) - st.step_ts_ns AS part_ns
    FROM steps st ASOF JOIN traced l ON st.pk = l.pk AND st.step_ts_ns > l.t
    WHERE l.t + l.seg_ns > st.step_ts_ns
),
clipped AS (
    SELECT trace_id, step_id, category, sum(part_ns) AS part_ns
    FROM (SELECT * FROM starting UNION ALL SELECT * FROM straddling) GROUP BY ALL
),
per_step AS (
    SELECT
        st.trace_id, st.pid, st.tid, st.step_id, st.step_dur_ns AS wall_ns,
        coalesce(sum(c.part_ns) FILTER (WHERE c.category = 1), 0) AS launch_host_ns,
        coalesce(sum(c.part_ns) FILTER (WHERE c.category = 2), 0) AS library_ns,
        coalesce(sum(c.part_ns) FILTER (WHERE c.category = 3), 0) AS framework_ns,
        coalesce(sum(c.part_ns) FILTER (WHERE c.category = 4), 0) AS sync_ns,
        coalesce(sum(c.part_ns) FILTER (WHERE c.category = 5), 0) AS other_runtime_ns,
        st.step_dur_ns - coalesce(sum(c.part_ns), 0) AS host_untraced_ns,
        coalesce(sum(c.part_ns) FILTER (WHERE c.category = 7), 0) AS unresolved_ns
    FROM steps st LEFT JOIN clipped c USING (trace_id, step_id)
    GROUP BY st.trace_id, st.pid, st.tid, st.step_id, st.step_dur_ns
)
SELECT
    t.trace_id,
    CASE WHEN GROUPING(t.pid, t.tid) = 0 THEN 'thread' ELSE 'trace' END AS scope_kind,
    t.pid,
    t.tid,
    CAST(NULL AS BIGINT) AS step_id,
    CAST(sum(p.wall_ns) AS BIGINT) AS wall_ns,
    CAST(sum(p.launch_host_ns) AS BIGINT) AS launch_host_ns,
    CAST(sum(p.library_ns) AS BIGINT) AS library_ns,
    CAST(sum(p.framework_ns) AS BIGINT) AS framework_ns,
    CAST(sum(p.sync_ns) AS BIGINT) AS sync_ns,
    CAST(sum(p.other_runtime_ns) AS BIGINT) AS other_runtime_ns,
    CAST(sum(p.host_untraced_ns) AS BIGINT) AS host_untraced_ns,
    CAST(sum(p.unresolved_ns) AS BIGINT) AS unresolved_ns
FROM per_thread p JOIN threads t USING (pk)
GROUP BY GROUPING SETS ((t.trace_id, t.pid, t.tid), (t.trace_id))
UNION ALL
SELECT
    trace_id, 'step', pid, tid, step_id,
    CAST(wall_ns AS BIGINT), CAST(launch_host_ns AS BIGINT), CAST(library_ns AS BIGINT), CAST(framework_ns AS BIGINT),
    CAST(sync_ns AS BIGINT), CAST(other_runtime_ns AS BIGINT), CAST(host_untraced_ns AS BIGINT),
    CAST(unresolved_ns AS BIGINT)
FROM per_step
