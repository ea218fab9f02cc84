-- table: int_kernel_links
-- grain: one row per kernel invocation (kind = 'kernel'), linked where the trace allows (METHOD.md section 1)
-- reads: int_kernel_launches, int_kernel_ext_ops, int_launch_enclosing, stg_events
-- description: The linked kernel sequence: each kernel with its launch call (same pid and correlation id), framework op (innermost dispatcher op open on the launching thread at the launch; Kineto External id first), Python-level op, vendor-library call, the link methods used and orphan flags. A graph launch feeds many kernels and is charged once (is_charged_launch).
-- column: trace_id: trace key
-- column: kernel_seq: 1-based position of the kernel in the trace ordered by start time (then device, stream, correlation id)
-- column: pid: launching host process
-- column: device_id: GPU index
-- column: stream_id: GPU stream
-- column: kernel_name: kernel name
-- column: kernel_ts_ns: kernel start (ns)
-- column: kernel_dur_ns: kernel duration (ns)
-- column: kernel_end_ns: kernel end (ns)
-- column: correlation_id: launch correlation id of the kernel
-- column: external_id: Kineto External id of the kernel
-- column: graph_id: CUDA graph id (Nsight) of a graph-launched kernel
-- column: launch_name: launch call name (cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch, ...)
-- column: launch_kind: launch call kind (runtime_api, driver_api, graph_launch)
-- column: launch_tid: thread of the launch call
-- column: launch_ts_ns: launch call start (ns)
-- column: launch_dur_ns: launch call duration (ns)
-- column: is_graph_launch: the kernel was fed by a CUDA/HIP graph launch
-- column: launch_kernel_count: kernels fed by the same launch call (1 for plain launches) (kernels)
-- column: is_charged_launch: this kernel carries its launch call's host cost (first kernel of the launch; orphans without a launch: false)
-- column: op_name: framework (dispatcher) op name, NVTX suffixes such as ', op_id = 12' stripped
-- column: op_namespace: namespace of op_name (aten, _C, vllm, ...)
-- column: op_ts_ns: framework op start (ns)
-- column: op_end_ns: framework op end (ns)
-- column: op_link_method: the route that linked the op: 'external_id' (Kineto cpu_op with the kernel's External id, a dispatcher op open on the launching thread at the launch), 'containment' (innermost enclosing dispatcher-op cpu_op) or 'nvtx' (innermost enclosing NVTX range named like a dispatcher op); every route applies the one dispatcher-op rule (stg_events.is_dispatcher_op)
-- column: py_name: Python-level op name
-- column: py_ts_ns: Python-level op start (ns)
-- column: py_link_method: 'external_id' (python_function or non-aten op with the op's External id) or 'containment' (innermost enclosing python_function)
-- column: lib_name: vendor-library API range (cuBLAS/cuDNN) enclosing the launch on the same thread
-- column: lib_ts_ns: library call start (ns)
-- column: has_launch: a launch call was found
-- column: has_op: a framework op was found
-- column: has_py: a Python-level op was found (t_py_ns is 0 otherwise)
-- column: has_lib: a library call was found
-- column: is_linked: launch call and framework op both found (the kernel is covered by T_Orchestrate)
-- column: is_orphan: not is_linked
-- column: shared_correlation_launches: launch calls of the kernel's process that carry its correlation id, of the kind the link would take (graph launch, else runtime, else driver call); above 1 nothing says which of them fed this kernel, so it is linked to none (orphan_reason 'shared_correlation_id', counted in taxbreak_by_scope.shared_correlation_kernels); NULL when none (launches)
-- column: orphan_reason: 'no_launch_call', 'shared_correlation_id' (two or more launch calls share the kernel's process and correlation id: which one fed it is unknown) or 'no_framework_op' for orphans, NULL for linked kernels
-- the kernels' launch calls, External-id ops and enclosing ranges are run-local tables of their own (int_kernel_launches
-- says why)
WITH
k AS (
    SELECT event_id, trace_key, ts_ns, dur_ns, end_ns, proc_key, device_id, stream_id,
           correlation_id, external_id, graph_id
    FROM stg_events WHERE kind = 'kernel'
),
kl AS (SELECT * FROM int_kernel_launches),
op_by_ext AS (SELECT * FROM int_kernel_ext_ops),
enclosing AS (SELECT * FROM int_launch_enclosing),
kop AS (
    SELECT
        kl.*,
        coalesce(x.event_id, c.event_id) AS op_event_id,
        coalesce(x.name, c.iv_name) AS op_name,
        coalesce(x.ts_ns, c.ts_ns) AS op_ts_ns,
        coalesce(x.end_ns, c.end_ns) AS op_end_ns,
        CASE
            WHEN x.event_id IS NOT NULL THEN 'external_id'
            WHEN c.kind = 'nvtx_range' THEN 'nvtx'
            WHEN c.event_id IS NOT NULL THEN 'containment'
        END AS op_link_method,
        CASE WHEN x.event_id IS NOT NULL THEN kl.external_id ELSE c.external_id END AS op_external_id,
        lib.iv_name AS lib_name,
        lib.ts_ns AS lib_ts_ns
    FROM kl
    LEFT JOIN op_by_ext x ON x.k_event_id = kl.event_id
    LEFT JOIN enclosing c ON c.family = 1 AND c.query_id = kl.l_event_id
    LEFT JOIN enclosing lib ON lib.family = 2 AND lib.query_id = kl.l_event_id
),
-- Sweep 2: the innermost python_function open at each framework op's start, on the op's (= launch's) thread.
iv3 AS (
    SELECT event_id, thread_key AS pk, ts_ns, end_ns FROM stg_events WHERE kind = 'python_function' AND dur_ns > 0
),
q3_all AS (
    SELECT DISTINCT op_event_id AS query_id, launch_thread_key AS pk, op_ts_ns AS t FROM kop
    WHERE op_event_id IS NOT NULL
),
q3 AS (SELECT * FROM q3_all SEMI JOIN (SELECT DISTINCT pk FROM iv3) USING (pk)),
iv3q AS (SELECT * FROM iv3 SEMI JOIN (SELECT DISTINCT pk FROM q3) USING (pk)),
sweep3 AS (
    SELECT pk, ts_ns AS t, 1 AS ord, -end_ns AS ord2, 1 AS delta, event_id AS ref FROM iv3q
    UNION ALL
    SELECT pk, end_ns, 0, -ts_ns, -1, event_id FROM iv3q
    UNION ALL
    SELECT pk, t, 2, 0, 0, query_id FROM q3
),
depths3 AS (
    SELECT pk, t, ord, ord2, ref, sum(delta) OVER (ORDER BY pk, t, ord, ord2, ref ROWS UNBOUNDED PRECEDING) AS depth
    FROM sweep3
),
py_enclosing AS (
    SELECT q.query_id, e.name AS iv_name, e.ts_ns, e.event_id
    FROM (SELECT pk, depth, t, ref AS query_id FROM depths3 WHERE ord = 2 AND depth > 0) q
    ASOF JOIN (SELECT pk, depth, t AS ts_ns, -ord2 AS end_ns, ref AS event_id FROM depths3 WHERE ord = 1) i
      ON q.pk = i.pk AND q.depth = i.depth AND q.t >= i.ts_ns
    JOIN stg_events e ON e.event_id = i.event_id
    WHERE q.t < i.end_ns
),
op_ext AS (
    SELECT DISTINCT op_event_id, proc_key, op_external_id, op_ts_ns FROM kop WHERE op_external_id IS NOT NULL
),
py_cand AS (
    SELECT event_id, proc_key, external_id, name, ts_ns FROM stg_events
    WHERE external_id IS NOT NULL
      AND (kind = 'python_function' OR (kind = 'framework_op' AND NOT starts_with(name, 'aten::')))
),
py_by_ext_all AS (
    SELECT o.op_event_id, p.name, p.ts_ns, p.event_id
    FROM op_ext o JOIN py_cand p ON p.proc_key = o.proc_key AND p.external_id = o.op_external_id
    WHERE p.event_id <> o.op_event_id AND p.ts_ns <= o.op_ts_ns
),
py_by_ext AS (
    SELECT op_event_id, arg_max(name, (ts_ns, event_id)) AS name, max(ts_ns) AS ts_ns
    FROM py_by_ext_all GROUP BY op_event_id
),
launch_rank AS (
    SELECT event_id, count(*) OVER w AS n_same_launch, row_number() OVER (w ORDER BY ts_ns, event_id) AS rn_same_launch
    FROM kl WHERE l_event_id IS NOT NULL
    WINDOW w AS (PARTITION BY l_event_id)
),
seq AS (
    SELECT event_id,
           row_number() OVER (PARTITION BY trace_key ORDER BY ts_ns, device_id, stream_id, correlation_id, event_id)
               AS kernel_seq
    FROM k
),
final AS (
    SELECT
        kop.*,
        coalesce(px.name, pc.iv_name) AS py_name,
        coalesce(px.ts_ns, pc.ts_ns) AS py_ts_ns,
        CASE WHEN px.name IS NOT NULL THEN 'external_id' WHEN pc.event_id IS NOT NULL THEN 'containment' END
            AS py_link_method,
        lr.n_same_launch,
        lr.rn_same_launch,
        sq.kernel_seq
    FROM kop
    LEFT JOIN py_by_ext px ON px.op_event_id = kop.op_event_id
    LEFT JOIN py_enclosing pc ON pc.query_id = kop.op_event_id
    LEFT JOIN launch_rank lr ON lr.event_id = kop.event_id
    JOIN seq sq ON sq.event_id = kop.event_id
)
SELECT
    trace_id,
    kernel_seq,
    pid,
    device_id,
    stream_id,
    name AS kernel_name,
    ts_ns AS kernel_ts_ns,
    dur_ns AS kernel_dur_ns,
    end_ns AS kernel_end_ns,
    correlation_id,
    external_id,
    graph_id,
    launch_name,
    launch_kind,
    launch_tid,
    launch_ts_ns,
    launch_dur_ns,
    coalesce(launch_kind = 'graph_launch', false) AS is_graph_launch,
    CASE WHEN l_event_id IS NULL THEN NULL ELSE n_same_launch END AS launch_kernel_count,
    l_event_id IS NOT NULL AND rn_same_launch = 1 AS is_charged_launch,
    op_name,
    CASE WHEN op_name LIKE '%::%' THEN split_part(op_name, '::', 1) END AS op_namespace,
    op_ts_ns,
    op_end_ns,
    op_link_method,
    py_name,
    py_ts_ns,
    py_link_method,
    lib_name,
    lib_ts_ns,
    l_event_id IS NOT NULL AS has_launch,
    op_name IS NOT NULL AS has_op,
    py_name IS NOT NULL AS has_py,
    lib_name IS NOT NULL AS has_lib,
    l_event_id IS NOT NULL AND op_name IS NOT NULL AS is_linked,
    NOT (l_event_id IS NOT NULL AND op_name IS NOT NULL) AS is_orphan,
    shared_correlation_launches,
    CASE WHEN shared_correlation_launches > 1 THEN 'shared_correlation_id'
         WHEN l_event_id IS NULL THEN 'no_launch_call' WHEN op_name IS NULL THEN 'no_framework_op' END
        AS orphan_reason
FROM (
    SELECT f.*, ke.trace_id, ke.pid, ke.name
    FROM final f
    JOIN (SELECT event_id, trace_id, pid, name FROM stg_events WHERE kind = 'kernel') ke ON ke.event_id = f.event_id
)
