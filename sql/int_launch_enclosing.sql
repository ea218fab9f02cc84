-- table: int_launch_enclosing
-- grain: one row per (family, launch call) with an enclosing range: family 1 the innermost dispatcher op or op-named NVTX range open at a launch without an External-id op, family 2 the innermost vendor-library call
-- reads: int_kernel_launches, int_kernel_ext_ops, stg_events
-- materialize: temp
-- description: The containment routes of int_kernel_links (METHOD.md section 1): per launch call, the innermost enclosing range of each family on the launch's thread, found by one sweep (the depth trick: a running sum of starts and ends; the innermost range open at a query of depth D is the latest range of depth D begun at or before it). A run-local step of int_kernel_links (int_kernel_launches says why it is a table of its own).
-- column: family: 1 dispatcher op or NVTX op range, 2 vendor-library call
-- column: query_id: stg_events.event_id of the launch call
-- column: event_id: stg_events.event_id of the enclosing range
-- column: ts_ns: range start (ns)
-- column: end_ns: range end (ns)
-- column: kind: stg_events.kind of the range
-- column: external_id: Kineto External id of the range
-- column: iv_name: the range's dispatcher name (stg_events.op_name), else its name
WITH
kl AS (SELECT * FROM int_kernel_launches),
op_by_ext AS (SELECT * FROM int_kernel_ext_ops),
-- Containment without cross joins (the depth trick): for properly nested ranges, sweep starts (+1), ends (-1)
-- and query points of one thread in time order; the innermost range open at a query of depth D is the latest
-- range of depth D that started at or before it.  Every range adds +1 and -1, so one running sum ordered by
-- (pk, time) equals the per-pk sum.  Start rows carry -end in ord2, so a range's end needs no join.  Only threads
-- that have both ranges and queries take part.  Sweep 1: family 1 dispatcher ops (framework ops and NVTX ranges
-- named ns::op, stg_events.is_dispatcher_op; queried only for launches without an External-id op) and family 2
-- library calls.
iv1 AS (
    SELECT event_id, hash(thread_key, 1) AS pk, ts_ns, end_ns
    FROM stg_events
    WHERE is_dispatcher_op AND dur_ns > 0
    UNION ALL
    SELECT event_id, hash(thread_key, 2), ts_ns, end_ns
    FROM stg_events
    WHERE host_call_class = 'library' AND dur_ns > 0
),
q1_all AS (
    SELECT DISTINCT kl.l_event_id AS query_id, hash(kl.launch_thread_key, 1) AS pk, kl.launch_ts_ns AS t, 1 AS family
    FROM kl ANTI JOIN op_by_ext x ON x.k_event_id = kl.event_id
    WHERE kl.l_event_id IS NOT NULL
    UNION ALL
    SELECT DISTINCT l_event_id, hash(launch_thread_key, 2), launch_ts_ns, 2 FROM kl WHERE l_event_id IS NOT NULL
),
q1 AS (SELECT * FROM q1_all SEMI JOIN (SELECT DISTINCT pk FROM iv1) USING (pk)),
iv1q AS (SELECT * FROM iv1 SEMI JOIN (SELECT DISTINCT pk FROM q1) USING (pk)),
sweep1 AS (
    SELECT pk, ts_ns AS t, 1 AS ord, -end_ns AS ord2, 1 AS delta, event_id AS ref, 0 AS family FROM iv1q
    UNION ALL
    SELECT pk, end_ns, 0, -ts_ns, -1, event_id, 0 FROM iv1q
    UNION ALL
    SELECT pk, t, 2, 0, 0, query_id, family FROM q1
),
depths1 AS (
    SELECT pk, t, ord, ord2, ref, family,
           sum(delta) OVER (ORDER BY pk, t, ord, ord2, ref ROWS UNBOUNDED PRECEDING) AS depth
    FROM sweep1
),
enclosing1 AS (
    SELECT q.family, q.query_id, i.event_id
    FROM (SELECT pk, depth, t, ref AS query_id, family FROM depths1 WHERE ord = 2 AND depth > 0) q
    ASOF JOIN (SELECT pk, depth, t AS ts_ns, -ord2 AS end_ns, ref AS event_id FROM depths1 WHERE ord = 1) i
      ON q.pk = i.pk AND q.depth = i.depth AND q.t >= i.ts_ns
    WHERE q.t < i.end_ns
),
enclosing AS (
    SELECT
        x.family, x.query_id, e.event_id, e.ts_ns, e.end_ns, e.kind, e.external_id,
        coalesce(e.op_name, e.name) AS iv_name
    FROM enclosing1 x JOIN stg_events e ON e.event_id = x.event_id
)
SELECT * FROM enclosing
