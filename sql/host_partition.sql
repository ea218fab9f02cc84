-- table: host_partition
-- grain: one row per host thread (scope_kind 'thread'); per trace one row for the threads that launch its kernels (scope_kind 'trace'), one for every other thread ('other_threads') and, for traces with outlier steps (int_steps.is_outlier_step), the 'trace' row without the outermost outlier steps' windows ('trace_excl_outliers'); per step one row for the step's launching threads ('step')
-- reads: int_host_segments, int_host_threads, int_host_windows, int_window_parts
-- description: The exact host-time partition (METHOD.md section 3, ours): a thread's wall time, from its first traced host event's start to its last one's end, split by nesting into disjoint self times of the innermost open event; the parts add up to wall_ns exactly. User annotations (ProfilerStep#N, record_function wrappers) are not parts: time under them and under no other event is host_untraced_ns. Launch calls that waited (longer than max(run_config.launch_blocked_min_ns, run_config.launch_blocked_median_factor x the thread's median launch-call duration)) are launch_blocked_ns, not launch_host_ns. The 'trace' and 'step' rows sum only the threads that launch the scope's kernels (a trace without kernels: every thread), the threads HDBI_wall is computed over; a thread that launches nothing (a Python threading.wait thread, a data loader) is reported in 'other_threads' and never enters them. Per step, each launching thread's parts are clipped to the step window [step_ts_ns, step_end_ns) (steps without kernels: the annotation's thread): wall_ns is the step's duration times the threads, and window time outside a thread's traced span is host_untraced_ns too.
-- column: trace_id: trace key
-- column: scope_kind: 'thread', 'trace', 'other_threads', 'trace_excl_outliers' or 'step'
-- column: pid: host process ('thread' rows)
-- column: tid: host thread ('thread' rows)
-- column: step_id: int_steps.step_id ('step' rows)
-- column: threads: host threads summed in the row (threads)
-- column: launches_kernels: the row's threads launch kernels of the trace (for 'step' rows: of the step; false for a step without kernels, whose row is its annotation's thread)
-- column: wall_ns: first event start to last event end per thread; summed over the row's threads for 'trace' and 'other_threads'; the step's duration times its threads for 'step' (ns)
-- column: launch_host_ns: self time inside launch calls (runtime and driver kernel launches, graph launches) that did not wait (ns)
-- column: launch_blocked_ns: self time inside launch calls that waited (longer than max(50 us, 10 x the thread's median launch call), ours); not host work, excluded from HDBI_wall (ns)
-- column: library_ns: self time inside cuBLAS/cuDNN API ranges, nested launches excluded (ns)
-- column: framework_ns: self time inside framework ops, NVTX op ranges and Python functions (ns)
-- column: sync_ns: self time inside synchronisation calls (*Synchronize*) (ns)
-- column: other_runtime_ns: self time inside other CUDA/HIP API calls (memcpy, malloc, event record, ...) (ns)
-- column: host_untraced_ns: time inside the scope covered by no traced event (ns)
-- column: unresolved_ns: time where the events are not properly nested and the innermost event is ambiguous (ns)
WITH
labelled AS (SELECT pk, t, seg_ns, category FROM int_host_segments),
threads AS (SELECT * FROM int_host_threads),
-- the windows (int_host_windows) and the host time clipped to them (int_window_parts)
steps AS (
    SELECT trace_id, step_id, step_level, step_ts_ns, step_end_ns, step_dur_ns, pk, launches_kernels
    FROM int_host_windows WHERE wkind = 'step'
),
outlier_windows AS (
    SELECT trace_id, step_id, step_level, step_ts_ns, step_end_ns, step_dur_ns, pk, launches_kernels
    FROM int_host_windows WHERE wkind = 'excl'
),
clipped AS (SELECT * FROM int_window_parts),
-- every piece of host time once, then one pivot into the partition's columns: a thread's segments, a step
-- window's clipped parts, an outlier window's clipped parts
pieces AS (
    SELECT 'thread' AS piece, pk, CAST(NULL AS BIGINT) AS step_id, category, seg_ns AS ns FROM labelled
    UNION ALL
    SELECT wkind, pk, step_id, category, part_ns FROM clipped
),
parts AS (
    SELECT
        piece, pk, step_id,
        sum(ns) AS total_ns,
        coalesce(sum(ns) FILTER (WHERE category = 1), 0) AS launch_host_ns,
        coalesce(sum(ns) FILTER (WHERE category = 8), 0) AS launch_blocked_ns,
        coalesce(sum(ns) FILTER (WHERE category = 2), 0) AS library_ns,
        coalesce(sum(ns) FILTER (WHERE category = 3), 0) AS framework_ns,
        coalesce(sum(ns) FILTER (WHERE category = 4), 0) AS sync_ns,
        coalesce(sum(ns) FILTER (WHERE category = 5), 0) AS other_runtime_ns,
        coalesce(sum(ns) FILTER (WHERE category = 6), 0) AS host_untraced_ns,
        coalesce(sum(ns) FILTER (WHERE category = 7), 0) AS unresolved_ns
    FROM pieces GROUP BY piece, pk, step_id
),
per_thread AS (
    SELECT pk, total_ns AS wall_ns, launch_host_ns, launch_blocked_ns, library_ns, framework_ns, sync_ns,
           other_runtime_ns, host_untraced_ns, unresolved_ns
    FROM parts WHERE piece = 'thread'
),
step_walls AS (
    SELECT trace_id, step_id, count(*) AS threads, bool_or(launches_kernels) AS launches_kernels,
           sum(step_dur_ns) AS wall_ns
    FROM steps GROUP BY trace_id, step_id
),
-- a step's window holds its threads' clipped parts; the rest of the window is untraced
per_step AS (
    SELECT
        st.trace_id, st.step_id, st.threads, st.launches_kernels, st.wall_ns,
        coalesce(sum(p.launch_host_ns), 0) AS launch_host_ns,
        coalesce(sum(p.launch_blocked_ns), 0) AS launch_blocked_ns,
        coalesce(sum(p.library_ns), 0) AS library_ns,
        coalesce(sum(p.framework_ns), 0) AS framework_ns,
        coalesce(sum(p.sync_ns), 0) AS sync_ns,
        coalesce(sum(p.other_runtime_ns), 0) AS other_runtime_ns,
        st.wall_ns - coalesce(sum(p.total_ns), 0) AS host_untraced_ns,
        coalesce(sum(p.unresolved_ns), 0) AS unresolved_ns
    FROM step_walls st
    LEFT JOIN (SELECT p.*, s.trace_id FROM parts p JOIN (SELECT DISTINCT trace_id, step_id, pk FROM steps) s
               USING (step_id, pk) WHERE p.piece = 'step') p
      ON p.trace_id = st.trace_id AND p.step_id = st.step_id
    GROUP BY st.trace_id, st.step_id, st.threads, st.launches_kernels, st.wall_ns
),
-- what the outlier windows hold of each thread's span: the window clipped to the span, its traced parts, and the
-- rest of it as untraced time
spans AS (SELECT pk, min(t) AS span_start_ns, max(t + seg_ns) AS span_end_ns FROM labelled GROUP BY pk),
excl AS (
    SELECT w.trace_id,
           sum(greatest(0, least(w.step_end_ns, sp.span_end_ns) - greatest(w.step_ts_ns, sp.span_start_ns)))
               AS wall_ns,
           coalesce(sum(p.launch_host_ns), 0) AS launch_host_ns,
           coalesce(sum(p.launch_blocked_ns), 0) AS launch_blocked_ns,
           coalesce(sum(p.library_ns), 0) AS library_ns,
           coalesce(sum(p.framework_ns), 0) AS framework_ns,
           coalesce(sum(p.sync_ns), 0) AS sync_ns,
           coalesce(sum(p.other_runtime_ns), 0) AS other_runtime_ns,
           coalesce(sum(p.unresolved_ns), 0) AS unresolved_ns,
           coalesce(sum(p.total_ns), 0) AS traced_ns
    FROM outlier_windows w JOIN spans sp USING (pk)
    LEFT JOIN parts p ON p.piece = 'excl' AND p.step_id = w.step_id AND p.pk = w.pk
    GROUP BY w.trace_id
),
per_thread_rows AS (
    SELECT t.trace_id, t.pid, t.tid, t.launches_kernels, t.in_trace_row, p.*
    FROM per_thread p JOIN threads t USING (pk)
)
SELECT
    trace_id,
    CASE WHEN GROUPING(pid, tid) = 0 THEN 'thread' WHEN in_trace_row THEN 'trace' ELSE 'other_threads' END
        AS scope_kind,
    pid,
    tid,
    CAST(NULL AS BIGINT) AS step_id,
    count(*) AS threads,
    bool_or(launches_kernels) AS launches_kernels,
    CAST(sum(wall_ns) AS BIGINT) AS wall_ns,
    CAST(sum(launch_host_ns) AS BIGINT) AS launch_host_ns,
    CAST(sum(launch_blocked_ns) AS BIGINT) AS launch_blocked_ns,
    CAST(sum(library_ns) AS BIGINT) AS library_ns,
    CAST(sum(framework_ns) AS BIGINT) AS framework_ns,
    CAST(sum(sync_ns) AS BIGINT) AS sync_ns,
    CAST(sum(other_runtime_ns) AS BIGINT) AS other_runtime_ns,
    CAST(sum(host_untraced_ns) AS BIGINT) AS host_untraced_ns,
    CAST(sum(unresolved_ns) AS BIGINT) AS unresolved_ns
FROM per_thread_rows
GROUP BY GROUPING SETS ((trace_id, pid, tid, in_trace_row, launches_kernels), (trace_id, in_trace_row))
UNION ALL
SELECT
    t.trace_id, 'trace_excl_outliers', NULL, NULL, NULL, count(*), bool_or(t.launches_kernels),
    CAST(sum(t.wall_ns) - any_value(x.wall_ns) AS BIGINT),
    CAST(sum(t.launch_host_ns) - any_value(x.launch_host_ns) AS BIGINT),
    CAST(sum(t.launch_blocked_ns) - any_value(x.launch_blocked_ns) AS BIGINT),
    CAST(sum(t.library_ns) - any_value(x.library_ns) AS BIGINT),
    CAST(sum(t.framework_ns) - any_value(x.framework_ns) AS BIGINT),
    CAST(sum(t.sync_ns) - any_value(x.sync_ns) AS BIGINT),
    CAST(sum(t.other_runtime_ns) - any_value(x.other_runtime_ns) AS BIGINT),
    CAST(sum(t.host_untraced_ns) - any_value(x.wall_ns - x.traced_ns) AS BIGINT),
    CAST(sum(t.unresolved_ns) - any_value(x.unresolved_ns) AS BIGINT)
FROM per_thread_rows t JOIN excl x USING (trace_id)
WHERE t.in_trace_row
GROUP BY t.trace_id
UNION ALL
SELECT
    trace_id, 'step', NULL, NULL, step_id, threads, launches_kernels,
    CAST(wall_ns AS BIGINT), CAST(launch_host_ns AS BIGINT), CAST(launch_blocked_ns AS BIGINT),
    CAST(library_ns AS BIGINT), CAST(framework_ns AS BIGINT), CAST(sync_ns AS BIGINT),
    CAST(other_runtime_ns AS BIGINT), CAST(host_untraced_ns AS BIGINT), CAST(unresolved_ns AS BIGINT)
FROM per_step
