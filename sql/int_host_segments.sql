-- table: int_host_segments
-- grain: one row per host-thread segment: a maximal stretch of one thread's wall time with one innermost traced event (or none)
-- reads: stg_events, run_config
-- materialize: temp
-- description: The host timeline split by nesting (METHOD.md section 3, ours): per host thread, from its first traced host event's start to its last one's end, cut at every start and end of its launch, library, framework, sync and other runtime calls, each segment labelled by the innermost event open over it. Events that do not nest properly (a `record_function` range that began inside a Python `__enter__` and outlives it) are cut at their parent's end for nesting; time with exactly one event open belongs to that event's category, deeper time to the innermost event still open after the cut (METHOD.md section 3); what stays unresolved is time no open event explains. The one place the host categories and the blocked-launch rule are applied: host_partition sums these segments and taxbreak.features.whatif replays them.
-- column: trace_id: trace key
-- column: pk: stg_events.thread_key of the thread
-- column: pid: host process
-- column: tid: host thread
-- column: t: segment start (ns)
-- column: seg_ns: segment length (ns)
-- column: category: 1 launch call that did not wait, 8 launch call that waited (longer than max(run_config.launch_blocked_min_ns, run_config.launch_blocked_median_factor x the thread's median launch call)), 2 library call, 3 framework op / NVTX op range / Python function, 4 sync call, 5 other runtime call, 6 untraced (under no event), 7 unresolved (events not properly nested and no open event left after the cut)
WITH
host AS (
    SELECT event_id, thread_key, ts_ns, end_ns, dur_ns, host_call_class
    FROM stg_events
    WHERE dur_ns > 0 AND (
        host_call_class IS NOT NULL OR kind IN ('framework_op', 'python_function')
        OR (kind = 'nvtx_range' AND is_dispatcher_op)
    )
),
-- a launch call waited when it is longer than max(launch_blocked_min_ns, factor x its thread's median launch call)
launch_limit AS (
    SELECT h.thread_key,
           greatest(any_value(c.launch_blocked_min_ns), any_value(c.launch_blocked_median_factor) * median(h.dur_ns))
               AS limit_ns
    FROM host h CROSS JOIN run_config c WHERE h.host_call_class = 'launch' GROUP BY h.thread_key
),
iv AS (
    SELECT
        h.event_id, h.thread_key AS pk, h.ts_ns, h.end_ns,
        CASE h.host_call_class
            WHEN 'launch' THEN CASE WHEN h.dur_ns > ll.limit_ns THEN 8 ELSE 1 END
            WHEN 'library' THEN 2
            WHEN 'sync' THEN 4
            WHEN 'other_runtime' THEN 5
            ELSE 3
        END AS category
    FROM host h LEFT JOIN launch_limit ll USING (thread_key)
),
-- starts (+1, carrying -end in ord2 and the category) and ends (-1) of every range, one running sum ordered by
-- (thread, time): each range nets 0, so the sum is the thread's nesting depth (see int_kernel_links).
-- The sweep's small columns are one byte wide and the depth an INTEGER (a sum of INTEGERs is a 16-byte HUGEINT):
-- two rows per host event are sorted and then joined on the depth, and narrower rows spill less at the analysis's
-- memory_limit (the 512 MiB bench trace: 2.4 instead of 2.7 CPU-s for this table, the same rows).
b AS (
    SELECT pk, ts_ns AS t, 1::UTINYINT AS ord, -end_ns AS ord2, 1::TINYINT AS delta, event_id,
           category::UTINYINT AS category
    FROM iv
    UNION ALL
    SELECT pk, end_ns, 0::UTINYINT, -ts_ns, -1::TINYINT, event_id, 0::UTINYINT FROM iv
),
d AS (
    SELECT
        pk, t, ord, ord2, category,
        CAST(sum(delta) OVER w AS INTEGER) AS depth,
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
labelled0 AS (
    SELECT pk, t, seg_ns, depth, CASE WHEN depth = 0 THEN 6 WHEN end_ns > t THEN category ELSE 7 END AS category
    FROM seg WHERE ord = 1
    UNION ALL
    SELECT
        s.pk, s.t, s.seg_ns, s.depth,
        CASE
            WHEN s.depth = 0 THEN 6
            WHEN st.end_ns IS NOT NULL AND st.end_ns > s.t THEN st.category
            ELSE 7
        END AS category
    FROM (SELECT * FROM seg WHERE ord = 0) s
    ASOF LEFT JOIN starts st ON s.pk = st.pk AND s.depth = st.depth AND s.t >= st.ts_ns
),
-- an improperly nested segment (the range open at its depth has ended: one that began inside its parent outlived
-- it) belongs, with exactly one event open (depth 1), to that event; deeper, to the innermost event still open
-- once the outliving range is cut at its parent's end, the range open one level up (METHOD.md section 3).  Such
-- segments are rare, so these joins are small.
-- At depth 1 exactly one range of the thread is open (ts_ns <= t < end_ns: the depth counts them), so it is the one
-- that ends last of those begun by t: a running maximum of the end over the starts, looked up by ASOF (a join of
-- the segments with every range open over them was quadratic in a thread's ranges: 27 s of CPU for 16 k such
-- segments of one thread).
-- Both lookups read only the threads that have such segments (SEMI JOIN on pk): the window and the two ASOF
-- joins sorted every thread's ranges even when nothing was unresolved (1 M kernels: 4.6 of 23.7 s of operator
-- time for no rows); the running maximum is per thread, so the rows it gives are the same.
unres AS (SELECT pk, t, depth, depth - 1 AS parent_depth FROM labelled0 WHERE category = 7),
open_last AS (
    SELECT pk, ts_ns, max(end_ns) OVER w AS end_ns, arg_max(category, end_ns) OVER w AS category
    FROM iv SEMI JOIN (SELECT DISTINCT pk FROM unres WHERE depth = 1) USING (pk)
    WINDOW w AS (PARTITION BY pk ORDER BY ts_ns)
),
resolved AS (
    SELECT u.pk, u.t, o.category
    FROM (SELECT pk, t FROM unres WHERE depth = 1) u
    ASOF JOIN open_last o ON u.pk = o.pk AND u.t >= o.ts_ns
    WHERE o.end_ns > u.t
    UNION ALL
    SELECT u.pk, u.t, st.category
    FROM (SELECT * FROM unres WHERE depth > 1) u
    ASOF JOIN (SELECT * FROM starts SEMI JOIN (SELECT DISTINCT pk FROM unres WHERE depth > 1) USING (pk)) st
      ON u.pk = st.pk AND u.parent_depth = st.depth AND u.t >= st.ts_ns
    WHERE st.end_ns > u.t
),
labelled AS (
    SELECT l.pk, l.t, l.seg_ns, coalesce(so.category, l.category) AS category
    FROM labelled0 l LEFT JOIN resolved so ON l.category = 7 AND so.pk = l.pk AND so.t = l.t
)
SELECT th.trace_id, l.pk, th.pid, th.tid, l.t, l.seg_ns, l.category
FROM labelled l
JOIN (SELECT DISTINCT thread_key, trace_id, pid, tid FROM stg_events WHERE thread_key IN (SELECT DISTINCT pk FROM iv)) th
  ON th.thread_key = l.pk
