-- table: taxbreak_by_scope
-- grain: one row per trace and scope: the whole trace, each step, each phase, each framework op name, each kernel name
-- reads: kernel_taxbreak, run_config
-- description: TaxBreak aggregates (METHOD.md section 2): T_Orchestrate = sum(delta_ft + delta_ct) + N * T_sys over linked launches, T_DeviceActive = sum of kernel durations in scope, HDBI = T_DeviceActive / (T_DeviceActive + T_Orchestrate) (NULL when 0 / 0), HDBI_linked over linked kernels only, with coverage. Kernels outside every step form the step scope 'outside_steps' (excluded from per-step figures; the trace scope includes them).
-- column: trace_id: trace key
-- column: scope_kind: 'trace', 'step', 'phase', 'op' (framework op name) or 'kernel' (kernel name)
-- column: scope_key: the scope's key: trace id, step_id as text ('outside_steps' for kernels in no step), phase ('unknown' when not known), op name ('(no op)' for kernels without one), kernel name
-- column: step_name: step name for step scopes
-- column: phase: phase for step and phase scopes
-- column: kernels: kernel invocations in scope (kernels)
-- column: linked_kernels: kernels with launch call and framework op (kernels)
-- column: orphan_kernels: kernels not linked (kernels)
-- column: linked_launches: N, launch calls charged (a graph launch counts once) (launches)
-- column: linked_fraction: linked_kernels / kernels
-- column: low_coverage: linked_fraction below run_config.coverage_threshold (0.9): HDBI is inflated by orphans
-- column: lib_kernels: linked kernels with i_lib = 1 (kernels)
-- column: py_missing_kernels: linked kernels without a Python-level op (t_py_ns = 0) (kernels)
-- column: t_dispatch_base_ns: T_dispatch_base of the trace (ns)
-- column: t_sys_ns: T_sys of the trace (ns)
-- column: t_py_ns: sum of t_py over charged kernels (ns)
-- column: t_dispatch_ns: sum of t_dispatch over charged kernels (ns)
-- column: delta_ft_ns: sum of framework translation (ns)
-- column: delta_ct_ns: sum of CUDA-library translation (ns)
-- column: delta_kt_ns: N * T_sys (ns)
-- column: delta_kt_excess_ns: sum of max(0, t_launch_obs - T_sys), diagnostic, not in HDBI (ns)
-- column: t_orchestrate_ns: delta_ft + delta_ct + delta_kt (ns)
-- column: t_device_active_ns: sum of kernel durations in scope (ns)
-- column: t_device_active_linked_ns: sum of durations of linked kernels (ns)
-- column: hdbi: T_DeviceActive / (T_DeviceActive + T_Orchestrate); NULL when both are 0
-- column: hdbi_linked: linked device time / (linked device time + T_Orchestrate); NULL when both are 0
WITH agg AS (
    SELECT
        trace_id,
        CASE
            WHEN GROUPING(step_id) = 0 THEN 'step'
            WHEN GROUPING(phase) = 0 THEN 'phase'
            WHEN GROUPING(op_name) = 0 THEN 'op'
            WHEN GROUPING(kernel_name) = 0 THEN 'kernel'
            ELSE 'trace'
        END AS scope_kind,
        CASE
            WHEN GROUPING(step_id) = 0 THEN coalesce(CAST(step_id AS VARCHAR), 'outside_steps')
            WHEN GROUPING(phase) = 0 THEN coalesce(phase, 'unknown')
            WHEN GROUPING(op_name) = 0 THEN coalesce(op_name, '(no op)')
            WHEN GROUPING(kernel_name) = 0 THEN kernel_name
            ELSE trace_id
        END AS scope_key,
        CASE WHEN GROUPING(step_id) = 0 THEN any_value(step_name) END AS step_name,
        CASE WHEN GROUPING(step_id) = 0 OR GROUPING(phase) = 0 THEN any_value(phase) END AS phase,
        count(*) AS kernels,
        count(*) FILTER (WHERE is_linked) AS linked_kernels,
        count(*) FILTER (WHERE NOT is_linked) AS orphan_kernels,
        count(*) FILTER (WHERE is_charged) AS linked_launches,
        count(*) FILTER (WHERE is_linked AND i_lib = 1) AS lib_kernels,
        count(*) FILTER (WHERE is_linked AND NOT has_py) AS py_missing_kernels,
        any_value(t_dispatch_base_ns) AS t_dispatch_base_ns,
        any_value(t_sys_ns) AS t_sys_ns,
        coalesce(sum(t_py_ns) FILTER (WHERE is_charged), 0) AS t_py_ns,
        coalesce(sum(t_dispatch_ns) FILTER (WHERE is_charged), 0) AS t_dispatch_ns,
        coalesce(sum(delta_ft_ns), 0) AS delta_ft_ns,
        coalesce(sum(delta_ct_ns), 0) AS delta_ct_ns,
        coalesce(sum(delta_kt_ns), 0) AS delta_kt_ns,
        coalesce(sum(delta_kt_excess_ns), 0) AS delta_kt_excess_ns,
        coalesce(sum(kernel_dur_ns), 0) AS t_device_active_ns,
        coalesce(sum(kernel_dur_ns) FILTER (WHERE is_linked), 0) AS t_device_active_linked_ns
    FROM kernel_taxbreak
    GROUP BY GROUPING SETS ((trace_id), (trace_id, step_id), (trace_id, phase), (trace_id, op_name), (trace_id, kernel_name))
)
SELECT
    a.trace_id,
    a.scope_kind,
    a.scope_key,
    a.step_name,
    a.phase,
    a.kernels,
    a.linked_kernels,
    a.orphan_kernels,
    a.linked_launches,
    a.linked_kernels / a.kernels AS linked_fraction,
    a.linked_kernels / a.kernels < c.coverage_threshold AS low_coverage,
    a.lib_kernels,
    a.py_missing_kernels,
    a.t_dispatch_base_ns,
    a.t_sys_ns,
    CAST(a.t_py_ns AS BIGINT) AS t_py_ns,
    CAST(a.t_dispatch_ns AS BIGINT) AS t_dispatch_ns,
    CAST(a.delta_ft_ns AS BIGINT) AS delta_ft_ns,
    CAST(a.delta_ct_ns AS BIGINT) AS delta_ct_ns,
    CAST(a.delta_kt_ns AS BIGINT) AS delta_kt_ns,
    CAST(a.delta_kt_excess_ns AS BIGINT) AS delta_kt_excess_ns,
    CAST(a.delta_ft_ns + a.delta_ct_ns + a.delta_kt_ns AS BIGINT) AS t_orchestrate_ns,
    CAST(a.t_device_active_ns AS BIGINT) AS t_device_active_ns,
    CAST(a.t_device_active_linked_ns AS BIGINT) AS t_device_active_linked_ns,
    a.t_device_active_ns / nullif(a.t_device_active_ns + a.delta_ft_ns + a.delta_ct_ns + a.delta_kt_ns, 0) AS hdbi,
    a.t_device_active_linked_ns
        / nullif(a.t_device_active_linked_ns + a.delta_ft_ns + a.delta_ct_ns + a.delta_kt_ns, 0) AS hdbi_linked
FROM agg a CROSS JOIN run_config c
