-- table: host_partition
-- grain: one row per host thread (scope_kind 'thread') and one per trace (scope_kind 'trace', the sum over its threads)
-- reads: stg_events
-- description: The exact host-time partition (METHOD.md section 3, ours): a thread's wall time, from its first traced host event's start to its last one's end, split by nesting into disjoint self times of the innermost open event; the parts add up to wall_ns exactly. User annotations (ProfilerStep#N, record_function wrappers) are not parts: time under them and under no other event is host_untraced_ns.
-- column: trace_id: trace key
-- column: scope_kind: 'thread' or 'trace'
-- column: pid: host process ('thread' rows)
-- column: tid: host thread ('thread' rows)
-- column: wall_ns: first event start to last event end per thread; summed over threads for 'trace' (ns)
-- column: launch_host_ns: self time inside launch calls (runtime and driver kernel launches, graph launches) (ns)
-- column: library_ns: self time inside cuBLAS/cuDNN API ranges, nested launches excluded (ns)
-- column: framework_ns: self time inside framework ops, NVTX op ranges and Python functions (ns)
-- column: sync_ns: self time inside synchronisation calls (*Synchronize*) (ns)
-- column: other_runtime_ns: self time inside other CUDA/HIP API calls (memcpy, malloc, event record, ...) (ns)
-- column: host_untraced_ns: time inside the thread's span covered by no traced event (ns)
-- column: unresolved_ns: time where the events are not properly nested and the innermost event is ambiguous (ns)
WITH
iv AS (
    SELECT
        event_id, trace_id, pid, tid, ts_ns, end_ns,
        CASE
            WHEN kind = 'graph_launch' THEN 'launch'
            WHEN kind = 'library_api' OR name ILIKE 'cublas%' OR name ILIKE 'cudnn%' THEN 'library'
            WHEN kind IN ('runtime_api', 'driver_api')
                 AND regexp_matches(name, '(?i)(launchkernel|launchcooperativekernel|^culaunch|^hiplaunch|modulelaunch|graphlaunch)')
                THEN 'launch'
            WHEN kind IN ('runtime_api', 'driver_api') AND name ILIKE '%synchronize%' THEN 'sync'
            WHEN kind IN ('runtime_api', 'driver_api') THEN 'other_runtime'
            ELSE 'framework'
        END AS category
    FROM stg_events
    WHERE dur_ns > 0 AND (
        kind IN ('runtime_api', 'driver_api', 'graph_launch', 'library_api', 'framework_op', 'python_function')
        OR (kind = 'nvtx_range' AND regexp_matches(name, '^[A-Za-z_][A-Za-z0-9_.]*::[A-Za-z_]'))
    )
),
b AS (
    SELECT trace_id, pid, tid, ts_ns AS t, 1 AS ord, -end_ns AS ord2, 1 AS delta, event_id FROM iv
    UNION ALL
    SELECT trace_id, pid, tid, end_ns, 0, -ts_ns, -1, event_id FROM iv
),
d AS (
    SELECT
        *,
        sum(delta) OVER w AS depth,
        lead(t) OVER w AS next_t
    FROM b
    WINDOW w AS (PARTITION BY trace_id, pid, tid ORDER BY t, ord, ord2, event_id ROWS UNBOUNDED PRECEDING)
),
starts AS (
    SELECT d.trace_id, d.pid, d.tid, d.depth, d.t AS ts_ns, iv.end_ns, iv.category
    FROM d JOIN iv USING (event_id) WHERE d.ord = 1
),
seg AS (
    SELECT trace_id, pid, tid, t, next_t - t AS seg_ns, depth FROM d WHERE next_t > t
),
labelled AS (
    SELECT
        s.trace_id, s.pid, s.tid, s.seg_ns,
        CASE
            WHEN s.depth = 0 THEN 'untraced'
            WHEN st.end_ns IS NOT NULL AND st.end_ns > s.t THEN st.category
            ELSE 'unresolved'
        END AS category
    FROM seg s ASOF LEFT JOIN starts st
      ON s.trace_id = st.trace_id AND s.pid = st.pid AND s.tid = st.tid AND s.depth = st.depth AND s.t >= st.ts_ns
)
SELECT
    trace_id,
    CASE WHEN GROUPING(pid, tid) = 0 THEN 'thread' ELSE 'trace' END AS scope_kind,
    pid,
    tid,
    CAST(sum(seg_ns) AS BIGINT) AS wall_ns,
    CAST(coalesce(sum(seg_ns) FILTER (WHERE category = 'launch'), 0) AS BIGINT) AS launch_host_ns,
    CAST(coalesce(sum(seg_ns) FILTER (WHERE category = 'library'), 0) AS BIGINT) AS library_ns,
    CAST(coalesce(sum(seg_ns) FILTER (WHERE category = 'framework'), 0) AS BIGINT) AS framework_ns,
    CAST(coalesce(sum(seg_ns) FILTER (WHERE category = 'sync'), 0) AS BIGINT) AS sync_ns,
    CAST(coalesce(sum(seg_ns) FILTER (WHERE category = 'other_runtime'), 0) AS BIGINT) AS other_runtime_ns,
    CAST(coalesce(sum(seg_ns) FILTER (WHERE category = 'untraced'), 0) AS BIGINT) AS host_untraced_ns,
    CAST(coalesce(sum(seg_ns) FILTER (WHERE category = 'unresolved'), 0) AS BIGINT) AS unresolved_ns
FROM labelled
GROUP BY GROUPING SETS ((trace_id, pid, tid), (trace_id))
