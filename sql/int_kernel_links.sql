-- table: int_kernel_links
-- grain: one row per kernel invocation (kind = 'kernel'), linked where the trace allows (METHOD.md section 1)
-- reads: stg_events
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
-- column: op_link_method: how the op was found: 'external_id' (Kineto External id, open on the launching thread at the launch) or 'containment' (innermost enclosing dispatcher op or NVTX op range)
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
-- column: orphan_reason: 'no_launch_call' or 'no_framework_op' for orphans, NULL for linked kernels
WITH
k AS (
    SELECT * FROM stg_events WHERE kind = 'kernel'
),
launch_candidates AS (
    SELECT *
    FROM stg_events
    WHERE kind IN ('runtime_api', 'driver_api', 'graph_launch') AND correlation_id IS NOT NULL
      AND (trace_id, pid, correlation_id) IN (SELECT trace_id, pid, correlation_id FROM k)
),
l AS (
    SELECT *
    FROM launch_candidates
    QUALIFY row_number() OVER (
        PARTITION BY trace_id, pid, correlation_id
        ORDER BY CASE kind WHEN 'graph_launch' THEN 0 WHEN 'runtime_api' THEN 1 ELSE 2 END, ts_ns, event_id
    ) = 1
),
kl AS (
    SELECT
        k.*,
        l.event_id AS l_event_id, l.name AS launch_name, l.kind AS launch_kind, l.tid AS launch_tid,
        l.ts_ns AS launch_ts_ns, l.dur_ns AS launch_dur_ns
    FROM k LEFT JOIN l ON k.trace_id = l.trace_id AND k.pid = l.pid AND k.correlation_id = l.correlation_id
),
-- host intervals by family: 'op' dispatcher ops (framework ops and NVTX op ranges named ns::op), 'lib' library
-- calls, 'py' python functions.  Only intervals of positive duration can contain anything.
iv AS (
    SELECT
        event_id, trace_id, pid, tid, ts_ns, end_ns, 'op' AS family, kind,
        CASE WHEN kind = 'nvtx_range' THEN trim(split_part(name, ',', 1)) ELSE name END AS iv_name
    FROM stg_events
    WHERE kind IN ('framework_op', 'nvtx_range') AND dur_ns > 0
      AND regexp_matches(name, '^[A-Za-z_][A-Za-z0-9_.]*::[A-Za-z_]')
    UNION ALL
    SELECT event_id, trace_id, pid, tid, ts_ns, end_ns, 'lib', kind, name
    FROM stg_events
    WHERE dur_ns > 0 AND (kind = 'library_api'
        OR (kind IN ('runtime_api', 'driver_api') AND (name ILIKE 'cublas%' OR name ILIKE 'cudnn%')))
    UNION ALL
    SELECT event_id, trace_id, pid, tid, ts_ns, end_ns, 'py', kind, name
    FROM stg_events
    WHERE kind = 'python_function' AND dur_ns > 0
),
launch_points AS (
    SELECT DISTINCT l_event_id AS query_id, trace_id, pid, launch_tid AS tid, launch_ts_ns AS t FROM kl
    WHERE l_event_id IS NOT NULL
),
queries AS (
    SELECT query_id, trace_id, pid, tid, t, 'op' AS family FROM launch_points
    UNION ALL
    SELECT query_id, trace_id, pid, tid, t, 'lib' FROM launch_points
    UNION ALL
    SELECT event_id, trace_id, pid, tid, ts_ns, 'py' FROM iv WHERE family = 'op'
),
-- Depth trick for properly nested ranges: sweep starts (+1), ends (-1) and query points in time order; the
-- innermost range open at a query of depth D is the latest range starting at or before it with depth D.
sweep AS (
    SELECT trace_id, pid, tid, family, ts_ns AS t, 1 AS ord, -end_ns AS ord2, 1 AS delta, event_id AS ref FROM iv
    UNION ALL
    SELECT trace_id, pid, tid, family, end_ns, 0, -ts_ns, -1, event_id FROM iv
    UNION ALL
    SELECT trace_id, pid, tid, family, t, 2, 0, 0, query_id FROM queries
),
depths AS (
    SELECT
        *,
        sum(delta) OVER (
            PARTITION BY trace_id, pid, tid, family ORDER BY t, ord, ord2 ROWS UNBOUNDED PRECEDING
        ) AS depth
    FROM sweep
),
iv_depth AS (
    SELECT d.trace_id, d.pid, d.tid, d.family, d.depth, iv.event_id, iv.ts_ns, iv.end_ns, iv.iv_name, iv.kind
    FROM depths d JOIN iv ON d.ref = iv.event_id AND d.family = iv.family
    WHERE d.ord = 1
),
q_depth AS (
    SELECT trace_id, pid, tid, family, t, depth, ref AS query_id FROM depths WHERE ord = 2 AND depth > 0
),
enclosing AS (
    SELECT q.family, q.query_id, i.event_id, i.ts_ns, i.end_ns, i.iv_name, i.kind
    FROM q_depth q ASOF JOIN iv_depth i
      ON q.trace_id = i.trace_id AND q.pid = i.pid AND q.tid = i.tid AND q.family = i.family
     AND q.depth = i.depth AND q.t >= i.ts_ns
    WHERE q.t < i.end_ns
),
fops AS (
    SELECT event_id, trace_id, pid, tid, name, ts_ns, end_ns, external_id
    FROM stg_events WHERE kind = 'framework_op' AND external_id IS NOT NULL
),
op_by_ext AS (
    SELECT kl.event_id AS k_event_id, o.event_id, o.name, o.ts_ns, o.end_ns
    FROM kl JOIN fops o
      ON kl.trace_id = o.trace_id AND kl.external_id = o.external_id AND kl.pid = o.pid AND kl.launch_tid = o.tid
    WHERE o.ts_ns <= kl.launch_ts_ns AND kl.launch_ts_ns < o.end_ns
    QUALIFY row_number() OVER (PARTITION BY kl.event_id ORDER BY o.ts_ns DESC, o.event_id DESC) = 1
),
kop AS (
    SELECT
        kl.*,
        coalesce(x.event_id, c.event_id) AS op_event_id,
        coalesce(x.name, c.iv_name) AS op_name,
        coalesce(x.ts_ns, c.ts_ns) AS op_ts_ns,
        coalesce(x.end_ns, c.end_ns) AS op_end_ns,
        CASE WHEN x.event_id IS NOT NULL THEN 'external_id' WHEN c.event_id IS NOT NULL THEN 'containment' END
            AS op_link_method,
        lib.iv_name AS lib_name,
        lib.ts_ns AS lib_ts_ns
    FROM kl
    LEFT JOIN op_by_ext x ON x.k_event_id = kl.event_id
    LEFT JOIN enclosing c ON c.family = 'op' AND c.query_id = kl.l_event_id
    LEFT JOIN enclosing lib ON lib.family = 'lib' AND lib.query_id = kl.l_event_id
),
op_ext AS (
    SELECT DISTINCT op_event_id, trace_id, external_id_op, op_ts_ns
    FROM (SELECT k2.op_event_id, k2.trace_id, e.external_id AS external_id_op, k2.op_ts_ns
          FROM kop k2 JOIN stg_events e ON e.event_id = k2.op_event_id
          WHERE e.external_id IS NOT NULL)
),
py_by_ext AS (
    SELECT o.op_event_id, p.name, p.ts_ns
    FROM op_ext o JOIN stg_events p
      ON p.trace_id = o.trace_id AND p.external_id = o.external_id_op
     AND (p.kind = 'python_function' OR (p.kind = 'framework_op' AND NOT starts_with(p.name, 'aten::')))
     AND p.event_id <> o.op_event_id AND p.ts_ns <= o.op_ts_ns
    QUALIFY row_number() OVER (PARTITION BY o.op_event_id ORDER BY p.ts_ns DESC, p.event_id DESC) = 1
),
final AS (
    SELECT
        kop.*,
        coalesce(px.name, pc.iv_name) AS py_name,
        coalesce(px.ts_ns, pc.ts_ns) AS py_ts_ns,
        CASE WHEN px.name IS NOT NULL THEN 'external_id' WHEN pc.event_id IS NOT NULL THEN 'containment' END
            AS py_link_method,
        count(*) OVER (PARTITION BY kop.l_event_id) AS n_same_launch,
        row_number() OVER (PARTITION BY kop.l_event_id ORDER BY kop.ts_ns, kop.event_id) AS rn_same_launch
    FROM kop
    LEFT JOIN py_by_ext px ON px.op_event_id = kop.op_event_id
    LEFT JOIN enclosing pc ON pc.family = 'py' AND pc.query_id = kop.op_event_id
)
SELECT
    trace_id,
    row_number() OVER (
        PARTITION BY trace_id ORDER BY ts_ns, device_id, stream_id, correlation_id, event_id
    ) AS kernel_seq,
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
    CASE WHEN l_event_id IS NULL THEN 'no_launch_call' WHEN op_name IS NULL THEN 'no_framework_op' END
        AS orphan_reason
FROM final
