-- table: int_kernel_ext_ops
-- grain: one row per kernel whose launch call is inside a dispatcher op of the launching thread with the kernel's Kineto External id
-- reads: int_kernel_launches, stg_events
-- materialize: temp
-- description: The framework op found by External id (the first route of int_kernel_links.op_link_method, METHOD.md section 1): a dispatcher op (stg_events.is_dispatcher_op) on the launch call's thread with the kernel's External id, open at the launch; of several, the latest begun. A run-local step of int_kernel_links (int_kernel_launches says why it is a table of its own).
-- column: k_event_id: stg_events.event_id of the kernel
-- column: event_id: stg_events.event_id of the op
-- column: name: the op's dispatcher name (stg_events.op_name)
-- column: ts_ns: op start (ns)
-- column: end_ns: op end (ns)
WITH
kl AS (SELECT * FROM int_kernel_launches),
fops AS (
    SELECT event_id, thread_key, op_name AS name, ts_ns, end_ns, external_id
    FROM stg_events WHERE kind = 'framework_op' AND is_dispatcher_op AND external_id IS NOT NULL
),
op_by_ext_all AS (
    SELECT kl.event_id AS k_event_id, o.event_id, o.name, o.ts_ns, o.end_ns
    FROM kl JOIN fops o ON kl.launch_thread_key = o.thread_key AND kl.external_id = o.external_id
    WHERE o.ts_ns <= kl.launch_ts_ns AND kl.launch_ts_ns < o.end_ns
),
op_by_ext AS (
    SELECT * FROM op_by_ext_all
    WHERE k_event_id NOT IN (SELECT k_event_id FROM op_by_ext_all GROUP BY 1 HAVING count(*) > 1)
    UNION ALL
    SELECT * FROM (
        SELECT * FROM op_by_ext_all
        WHERE k_event_id IN (SELECT k_event_id FROM op_by_ext_all GROUP BY 1 HAVING count(*) > 1)
        QUALIFY row_number() OVER (PARTITION BY k_event_id ORDER BY ts_ns DESC, event_id DESC) = 1
    )
)
SELECT * FROM op_by_ext
