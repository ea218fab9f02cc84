-- table: taxbreak_by_scope
-- grain: one row per trace and scope: the whole trace, the trace without its outlier steps (only where it has some), each step, each phase, each framework op name, each kernel name
-- reads: kernel_taxbreak, int_kernel_links, int_steps, host_partition, skip_by_trace, run_config
-- description: TaxBreak aggregates (METHOD.md section 2): T_Orchestrate = sum(delta_ft + delta_ct) + N * T_sys over linked launches, T_DeviceActive = sum of kernel durations in scope, HDBI = T_DeviceActive / (T_DeviceActive + T_Orchestrate) (NULL when 0 / 0), HDBI_linked over linked kernels only, with coverage. Beside them the exact host partition of the threads that launch the scope's kernels (host_partition, METHOD.md section 3) and HDBI_wall = T_DeviceActive / (T_DeviceActive + launch + library + framework host time) (ours), with flags where T_Orchestrate exceeds that wall time (naming the top contributing kernels) and where blocked launch or sync time dominates the dispatch terms. Kernels outside every step form the step scope 'outside_steps' (excluded from per-step figures; the trace scope includes them). Wall terms exist for 'trace', 'trace_excl_outliers', 'step' and 'phase' scopes; NULL for the others.
-- column: trace_id: trace key
-- column: scope_kind: 'trace', 'trace_excl_outliers' (the trace without the kernels and host time of its outlier steps, int_steps.is_outlier_step; only for traces with outlier steps), 'step', 'phase', 'op' (framework op name) or 'kernel' (kernel name)
-- column: scope_key: the scope's key: trace id (both trace scopes), step_id as text ('outside_steps' for kernels in no step), phase ('unknown' when not known), op name ('(no op)' for kernels without one), kernel name
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
-- column: t_dispatch_base_samples: the samples T_dispatch_base is the median of: charged linked kernels of the trace with i_lib = 0 and t_dispatch_ns > 100 (kernels)
-- column: dispatch_base_unstable: T_dispatch_base rests on 1 to run_config.dispatch_base_min_samples - 1 (9) samples: one mis-ruled kernel moves ΔFT/ΔCT (METHOD.md section 2); with none it is NULL (unknown)
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
-- column: t_dispatch_blocked_ns: sum over charged kernels of the dispatch time spent inside other launch or sync calls (kernel_taxbreak.t_dispatch_blocked_ns, ours) (ns)
-- column: dispatch_blocked_flag: t_dispatch_blocked_ns exceeds run_config.dispatch_blocked_share (0.5) of delta_ft + delta_ct: the dispatch terms are mostly waiting, not translation (ours)
-- column: host_threads: kernel-launching host threads whose partition the wall terms sum (threads)
-- column: host_wall_ns: wall time of those threads in the scope (their whole traced span for the trace; the step window per thread for a step; summed over the leaf steps of a phase) (ns)
-- column: host_launch_ns: their self time in launch calls that did not wait (ns)
-- column: host_launch_blocked_ns: their self time in launch calls that waited; not in HDBI_wall (ns)
-- column: host_library_ns: their self time in cuBLAS/cuDNN calls (ns)
-- column: host_framework_ns: their self time in framework ops and Python functions (ns)
-- column: host_sync_ns: their self time in synchronisation calls; not in HDBI_wall (ns)
-- column: host_other_runtime_ns: their self time in other runtime calls; not in HDBI_wall (ns)
-- column: host_untraced_ns: their time under no traced event (ns)
-- column: hdbi_wall: T_DeviceActive / (T_DeviceActive + host_launch + host_library + host_framework) (METHOD.md section 3, ours): never counts more host time than the launching threads spent; NULL when the scope has no kernels or no wall terms
-- column: orchestrate_exceeds_wall: T_Orchestrate is larger than host_wall_ns: the paper's per-kernel prefixes count the same host time more than once (METHOD.md section 2, known property)
-- column: top_orchestrate_kernels: where orchestrate_exceeds_wall, the three kernels with the largest delta_ft + delta_ct: kernel_seq, kernel_name, op_name, py_name (the Python op whose prefix they carry) and orchestrate_ns; NULL otherwise
-- column: no_kernels_reason: for the trace row of a trace without kernels, why its figures are empty (skip_by_trace); NULL otherwise
-- column: is_outlier_step: for step scopes, int_steps.is_outlier_step; for the trace scope, whether the trace has outlier steps
-- column: shared_correlation_kernels: for the trace scope, kernels left unlinked because two or more launch calls of their process share their correlation id (int_kernel_links.orphan_reason 'shared_correlation_id': which launch fed them is unknown); NULL for other scopes (kernels)
-- column: impossible_duration_kernels: for trace and step scopes, kernels whose duration exceeds run_config.kernel_wall_factor (10) x the scope's host_wall_ns: no launching thread was there for most of it, a corrupt duration (ours); their time is in T_DeviceActive, so HDBI and AKD are not to be read; NULL for other scopes (kernels)
-- column: max_kernel_dur_ns: for trace and step scopes with impossible_duration_kernels, the longest such kernel's duration; NULL otherwise (ns)
WITH
kt AS (
    SELECT k.*, false AS excl_outliers FROM kernel_taxbreak k
    UNION ALL
    -- the trace once more without the kernels of its outlier steps, for traces that have some
    SELECT k.*, true FROM kernel_taxbreak k JOIN int_steps s USING (trace_id, step_id)
    WHERE NOT s.in_outlier_step AND k.trace_id IN (SELECT trace_id FROM int_steps WHERE is_outlier_step)
    UNION ALL
    SELECT k.*, true FROM kernel_taxbreak k
    WHERE k.step_id IS NULL AND k.trace_id IN (SELECT trace_id FROM int_steps WHERE is_outlier_step)
),
agg0 AS (
    SELECT
        trace_id,
        CASE
            WHEN GROUPING(step_id) = 0 THEN 'step'
            WHEN GROUPING(phase) = 0 THEN 'phase'
            WHEN GROUPING(op_name) = 0 THEN 'op'
            WHEN GROUPING(kernel_name) = 0 THEN 'kernel'
            WHEN excl_outliers THEN 'trace_excl_outliers'
            ELSE 'trace'
        END AS scope_kind,
        excl_outliers,
        step_id AS g_step_id,
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
        count(*) FILTER (WHERE is_charged AND i_lib = 0 AND t_dispatch_ns > 100) AS base_samples,
        any_value(t_sys_ns) AS t_sys_ns,
        coalesce(sum(t_py_ns) FILTER (WHERE is_charged), 0) AS t_py_ns,
        coalesce(sum(t_dispatch_ns) FILTER (WHERE is_charged), 0) AS t_dispatch_ns,
        coalesce(sum(t_dispatch_blocked_ns) FILTER (WHERE is_charged), 0) AS t_dispatch_blocked_ns,
        coalesce(sum(delta_ft_ns), 0) AS delta_ft_ns,
        coalesce(sum(delta_ct_ns), 0) AS delta_ct_ns,
        coalesce(sum(delta_kt_ns), 0) AS delta_kt_ns,
        coalesce(sum(delta_kt_excess_ns), 0) AS delta_kt_excess_ns,
        coalesce(sum(kernel_dur_ns), 0) AS t_device_active_ns,
        coalesce(sum(kernel_dur_ns) FILTER (WHERE is_linked), 0) AS t_device_active_linked_ns
    FROM kt
    GROUP BY GROUPING SETS (
        (trace_id, excl_outliers), (trace_id, excl_outliers, step_id), (trace_id, excl_outliers, phase),
        (trace_id, excl_outliers, op_name), (trace_id, excl_outliers, kernel_name)
    )
),
agg AS (
    SELECT *, CAST(NULL AS VARCHAR) AS no_kernels_reason FROM agg0
    WHERE NOT excl_outliers OR scope_kind = 'trace_excl_outliers'
    UNION ALL
    -- a trace without kernels keeps its trace row, with the reason
    SELECT trace_id, 'trace', false, NULL, trace_id, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, 0, NULL, 0, 0, 0, 0, 0, 0, 0,
           0, 0, no_kernels_reason
    FROM skip_by_trace WHERE no_kernels_reason IS NOT NULL
),
-- host wall terms per scope: the trace's launching threads; a step's launching threads in its window; a phase's
-- leaf steps; the trace without its outermost outlier steps
hp_step AS (
    SELECT h.*, s.phase, s.is_leaf_step
    FROM host_partition h JOIN int_steps s USING (trace_id, step_id) WHERE h.scope_kind = 'step'
),
wall AS (
    SELECT trace_id, scope_kind, trace_id AS scope_key, threads, wall_ns, launch_host_ns, launch_blocked_ns,
           library_ns, framework_ns, sync_ns, other_runtime_ns, host_untraced_ns
    FROM host_partition WHERE scope_kind IN ('trace', 'trace_excl_outliers')
    UNION ALL
    SELECT trace_id, 'step', CAST(step_id AS VARCHAR), threads, wall_ns, launch_host_ns, launch_blocked_ns, library_ns,
           framework_ns, sync_ns, other_runtime_ns, host_untraced_ns
    FROM hp_step
    UNION ALL
    SELECT trace_id, 'phase', phase, max(threads), sum(wall_ns), sum(launch_host_ns), sum(launch_blocked_ns),
           sum(library_ns), sum(framework_ns), sum(sync_ns), sum(other_runtime_ns), sum(host_untraced_ns)
    FROM hp_step WHERE is_leaf_step AND phase IS NOT NULL GROUP BY trace_id, phase
),
-- the kernels that contribute most to T_Orchestrate, per trace and per step: the top 3 of each are picked from
-- kernel_taxbreak alone, and only those few look up their Python op in int_kernel_links (the same pick again over
-- them gives the same lists, in the same order)
charged AS (
    SELECT trace_id, step_id, kernel_seq, kernel_name, op_name, delta_ft_ns + delta_ct_ns AS orchestrate_ns
    FROM kernel_taxbreak WHERE is_charged
),
top_seqs AS (
    SELECT trace_id, max_by(kernel_seq, (orchestrate_ns, -kernel_seq), 3) AS seqs FROM charged GROUP BY trace_id
    UNION ALL
    SELECT trace_id, max_by(kernel_seq, (orchestrate_ns, -kernel_seq), 3)
    FROM charged WHERE step_id IS NOT NULL GROUP BY trace_id, step_id
),
contrib AS (
    SELECT k.trace_id, k.step_id, k.kernel_seq, k.kernel_name, k.op_name, l.py_name, k.orchestrate_ns
    FROM charged k
    SEMI JOIN (SELECT DISTINCT trace_id, unnest(seqs) AS kernel_seq FROM top_seqs) t USING (trace_id, kernel_seq)
    JOIN int_kernel_links l USING (trace_id, kernel_seq)
),
top_trace AS (
    SELECT trace_id, max_by({'kernel_seq': kernel_seq, 'kernel_name': kernel_name, 'op_name': op_name,
                             'py_name': py_name, 'orchestrate_ns': orchestrate_ns}, (orchestrate_ns, -kernel_seq), 3)
                         AS top_kernels
    FROM contrib GROUP BY trace_id
),
top_step AS (
    SELECT trace_id, CAST(step_id AS VARCHAR) AS scope_key,
           max_by({'kernel_seq': kernel_seq, 'kernel_name': kernel_name, 'op_name': op_name,
                   'py_name': py_name, 'orchestrate_ns': orchestrate_ns}, (orchestrate_ns, -kernel_seq), 3)
               AS top_kernels
    FROM contrib WHERE step_id IS NOT NULL GROUP BY trace_id, step_id
),
outl AS (
    SELECT trace_id, CAST(step_id AS VARCHAR) AS scope_key, is_outlier_step FROM int_steps
),
-- kernels that cannot have run in their scope: longer than kernel_wall_factor x its launching threads' wall time
too_long AS (
    SELECT k.trace_id, 'trace' AS scope_kind, k.trace_id AS scope_key, count(*) AS kernels,
           max(k.kernel_dur_ns) AS max_dur_ns
    FROM kernel_taxbreak k JOIN host_partition h ON h.trace_id = k.trace_id AND h.scope_kind = 'trace'
    CROSS JOIN run_config c
    WHERE k.kernel_dur_ns > c.kernel_wall_factor * h.wall_ns
    GROUP BY ALL
    UNION ALL
    SELECT k.trace_id, 'step', CAST(k.step_id AS VARCHAR), count(*), max(k.kernel_dur_ns)
    FROM kernel_taxbreak k JOIN hp_step h ON h.trace_id = k.trace_id AND h.step_id = k.step_id
    CROSS JOIN run_config c
    WHERE k.kernel_dur_ns > c.kernel_wall_factor * h.wall_ns
    GROUP BY ALL
),
shared_corr AS (
    SELECT trace_id, count(*) AS kernels FROM int_kernel_links WHERE orphan_reason = 'shared_correlation_id'
    GROUP BY trace_id
),
x AS (
    SELECT
        a.*,
        CAST(a.delta_ft_ns + a.delta_ct_ns + a.delta_kt_ns AS BIGINT) AS t_orchestrate,
        w.threads AS host_threads, w.wall_ns AS host_wall_ns, w.launch_host_ns AS host_launch_ns,
        w.launch_blocked_ns AS host_launch_blocked_ns, w.library_ns AS host_library_ns,
        w.framework_ns AS host_framework_ns, w.sync_ns AS host_sync_ns, w.other_runtime_ns AS host_other_runtime_ns,
        w.host_untraced_ns AS host_untraced_ns,
        CASE a.scope_kind WHEN 'trace' THEN tt.top_kernels WHEN 'step' THEN ts.top_kernels END AS top_kernels,
        CASE a.scope_kind
            WHEN 'step' THEN coalesce(o.is_outlier_step, false)
            WHEN 'trace' THEN a.trace_id IN (SELECT trace_id FROM int_steps WHERE is_outlier_step)
        END AS is_outlier_step,
        CASE WHEN a.scope_kind = 'trace' THEN coalesce(sc.kernels, 0) END AS shared_correlation_kernels,
        CASE WHEN a.scope_kind IN ('trace', 'step') THEN coalesce(tl.kernels, 0) END AS impossible_duration_kernels,
        tl.max_dur_ns AS max_kernel_dur_ns
    FROM agg a
    LEFT JOIN wall w ON w.trace_id = a.trace_id AND w.scope_kind = a.scope_kind AND w.scope_key = a.scope_key
    LEFT JOIN top_trace tt ON tt.trace_id = a.trace_id
    LEFT JOIN top_step ts ON ts.trace_id = a.trace_id AND ts.scope_key = a.scope_key
    LEFT JOIN outl o ON o.trace_id = a.trace_id AND o.scope_key = a.scope_key
    LEFT JOIN shared_corr sc ON sc.trace_id = a.trace_id AND a.scope_kind = 'trace'
    LEFT JOIN too_long tl ON tl.trace_id = a.trace_id AND tl.scope_kind = a.scope_kind AND tl.scope_key = a.scope_key
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
    a.linked_kernels / nullif(a.kernels, 0) AS linked_fraction,
    a.linked_kernels / nullif(a.kernels, 0) < c.coverage_threshold AS low_coverage,
    a.lib_kernels,
    a.py_missing_kernels,
    a.t_dispatch_base_ns,
    max(CASE WHEN a.scope_kind = 'trace' THEN a.base_samples END) OVER (PARTITION BY a.trace_id)
        AS t_dispatch_base_samples,
    max(CASE WHEN a.scope_kind = 'trace' THEN a.base_samples END) OVER (PARTITION BY a.trace_id)
        BETWEEN 1 AND c.dispatch_base_min_samples - 1 AS dispatch_base_unstable,
    a.t_sys_ns,
    CAST(a.t_py_ns AS BIGINT) AS t_py_ns,
    CAST(a.t_dispatch_ns AS BIGINT) AS t_dispatch_ns,
    CAST(a.delta_ft_ns AS BIGINT) AS delta_ft_ns,
    CAST(a.delta_ct_ns AS BIGINT) AS delta_ct_ns,
    CAST(a.delta_kt_ns AS BIGINT) AS delta_kt_ns,
    CAST(a.delta_kt_excess_ns AS BIGINT) AS delta_kt_excess_ns,
    a.t_orchestrate AS t_orchestrate_ns,
    CAST(a.t_device_active_ns AS BIGINT) AS t_device_active_ns,
    CAST(a.t_device_active_linked_ns AS BIGINT) AS t_device_active_linked_ns,
    a.t_device_active_ns / nullif(a.t_device_active_ns + a.t_orchestrate, 0) AS hdbi,
    a.t_device_active_linked_ns / nullif(a.t_device_active_linked_ns + a.t_orchestrate, 0) AS hdbi_linked,
    CAST(a.t_dispatch_blocked_ns AS BIGINT) AS t_dispatch_blocked_ns,
    a.t_dispatch_blocked_ns > c.dispatch_blocked_share * (a.delta_ft_ns + a.delta_ct_ns) AS dispatch_blocked_flag,
    a.host_threads,
    a.host_wall_ns,
    a.host_launch_ns,
    a.host_launch_blocked_ns,
    a.host_library_ns,
    a.host_framework_ns,
    a.host_sync_ns,
    a.host_other_runtime_ns,
    a.host_untraced_ns,
    CASE WHEN a.kernels > 0 THEN a.t_device_active_ns
        / nullif(a.t_device_active_ns + a.host_launch_ns + a.host_library_ns + a.host_framework_ns, 0) END AS hdbi_wall,
    a.t_orchestrate > a.host_wall_ns AS orchestrate_exceeds_wall,
    CASE WHEN a.t_orchestrate > a.host_wall_ns THEN a.top_kernels END AS top_orchestrate_kernels,
    a.is_outlier_step,
    a.no_kernels_reason,
    a.shared_correlation_kernels,
    a.impossible_duration_kernels,
    a.max_kernel_dur_ns
FROM x a CROSS JOIN run_config c
