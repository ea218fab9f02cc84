-- table: levers
-- grain: one row per trace, scope (the trace, each phase) and lever that applies to it: what to fix, ranked by the inference latency the what-if replay predicts it saves
-- reads: whatif_results, taxbreak_by_scope, skip_by_kernel, fusion_candidates, int_steps
-- computed_by: taxbreak.features.whatif.write_tables
-- description: The levers of the verdict (docs/method.md "The verdict", ours), each one what-if scenario replayed on this trace (taxbreak.features.whatif): framework translation twice as fast (lever_framework_x2: framework op and Python self time / 2; targets: the ops with the most delta_ft), CUDA-library translation twice as fast (lever_library_x2: cuBLAS/cuDNN call self time / 2; targets: the kernels with the most delta_ct; only where the launching threads spent time in cuBLAS/cuDNN API ranges: without them library translation hides in framework op time, which the framework lever speeds up), the launch path halved (lever_launch_x0.5: T_sys x 0.5), CUDA graphs for the decode phase (cuda_graph_decode; only where the scope has decode steps) or, in a trace with steps and no decode phase, for every step (cuda_graph_all), the top five fusion chains fused (fuse_top5; targets: the chains with the most host time saved), a host 1.5x as fast (host_x1.5), on the device side the three kernels with the most time twice as fast (lever_top3_kernels_x2; targets: those kernels) (every kernel faster, gpu_x2, is not a lever: nothing to act on). The gain is the replay's IL against the trace's own (whatif_results.il_own_ns), so "CUDA graphs for decode: -41%" is a figure `taxbreak whatif TRACE --cuda-graph decode` reproduces. Written after each replay of the default scenarios (taxbreak.features.whatif.write_tables), for the traces replayed.
-- column: trace_id: trace key
-- column: scope_kind: 'trace' or 'phase'
-- column: scope_key: 'trace' or the phase name, as in whatif_results
-- column: lever: 'framework_translation', 'library_translation', 'launch_path', 'cuda_graphs', 'kernel_fusion', 'faster_host' or 'top_kernels'
-- column: side: 'host' (software-stack overhead) or 'device' (device-side work)
-- column: scenario: the whatif_results scenario the gain comes from
-- column: label: the lever in words, e.g. 'CUDA graphs for decode'
-- column: targets: where to act, most first: ops (framework translation, by delta_ft), kernels (library translation, by delta_ct; top kernels, by total time) or fusion chains (kernel names joined by ' → ', by host time saved), each with its figure in ns; NULL for the levers that have none
-- column: il_own_ns: the scope's IL in the trace (ns)
-- column: il_replay_ns: the scope's IL in the replay (ns)
-- column: il_change_ns: il_replay_ns - il_own_ns; negative when the lever makes the scope faster (ns)
-- column: il_change_pct: il_change_ns / il_own_ns x 100 (percent)
-- column: lever_rank: 1 = the largest predicted latency cut in the scope (then host before device, then lever name)
WITH
scen AS (
    SELECT * FROM (VALUES
        ('lever_framework_x2', 'framework_translation', 'host', 'framework translation 2x faster'),
        ('lever_library_x2', 'library_translation', 'host', 'CUDA-library translation 2x faster'),
        ('lever_launch_x0.5', 'launch_path', 'host', 'launch path (T_sys) halved'),
        ('cuda_graph_decode', 'cuda_graphs', 'host', 'CUDA graphs for decode'),
        ('cuda_graph_all', 'cuda_graphs', 'host', 'CUDA graphs for every step'),
        ('fuse_top5', 'kernel_fusion', 'host', 'fuse the top 5 kernel chains'),
        ('host_x1.5', 'faster_host', 'host', 'a 1.5x faster host CPU'),
        ('lever_top3_kernels_x2', 'top_kernels', 'device', 'the top 3 kernels 2x faster')
    ) AS t(scenario, lever, side, label)
),
sel AS (SELECT unnest($trace_ids::VARCHAR[]) AS trace_id),
-- which traces have decode steps, and steps at all (CUDA graphs apply per step)
ph AS (
    SELECT trace_id, bool_or(phase = 'decode') AS has_decode, count(*) > 0 AS has_steps
    FROM int_steps WHERE trace_id IN (SELECT trace_id FROM sel) GROUP BY trace_id
),
ops AS (
    SELECT trace_id, list({'name': scope_key, 'value_ns': delta_ft_ns} ORDER BY delta_ft_ns DESC, scope_key)[1:3] AS t
    FROM taxbreak_by_scope
    WHERE scope_kind = 'op' AND delta_ft_ns > 0 AND trace_id IN (SELECT trace_id FROM sel)
    GROUP BY trace_id
),
-- the library lever needs library calls the replay can speed up: traces whose launching threads spent time in
-- cuBLAS/cuDNN API ranges (without them, library translation hides inside framework op time)
libk AS (
    SELECT k.trace_id, list({'name': k.scope_key, 'value_ns': k.delta_ct_ns} ORDER BY k.delta_ct_ns DESC, k.scope_key)[1:3] AS t,
           any_value(coalesce(tr.host_library_ns, 0) > 0) AS has_library_time
    FROM taxbreak_by_scope k
    LEFT JOIN taxbreak_by_scope tr ON tr.trace_id = k.trace_id AND tr.scope_kind = 'trace'
    WHERE k.scope_kind = 'kernel' AND k.delta_ct_ns > 0 AND k.trace_id IN (SELECT trace_id FROM sel)
    GROUP BY k.trace_id
),
topk AS (
    SELECT trace_id, list({'name': kernel_name, 'value_ns': total_dur_ns} ORDER BY rank_by_time)[1:3] AS t
    FROM skip_by_kernel WHERE rank_by_time <= 3 AND trace_id IN (SELECT trace_id FROM sel)
    GROUP BY trace_id
),
chains AS (
    SELECT trace_id, list({'name': array_to_string(chain, ' → '), 'value_ns': host_time_saved_ns} ORDER BY rank)[1:5] AS t
    FROM fusion_candidates WHERE is_listed AND rank <= 5 AND trace_id IN (SELECT trace_id FROM sel)
    GROUP BY trace_id
),
r AS (
    SELECT w.trace_id, w.scope_kind, w.scope_key, s.lever, s.side, w.scenario, s.label, w.il_own_ns, w.il_replay_ns
    FROM whatif_results w JOIN scen s USING (scenario)
    LEFT JOIN ph ON ph.trace_id = w.trace_id
    WHERE w.trace_id IN (SELECT trace_id FROM sel) AND w.scope_kind IN ('trace', 'phase') AND w.il_own_ns > 0
      AND (w.scenario <> 'cuda_graph_decode'
           OR (w.scope_kind = 'trace' AND coalesce(ph.has_decode, false)) OR w.scope_key = 'decode')
      AND (w.scenario <> 'cuda_graph_all'
           OR (w.scope_kind = 'trace' AND coalesce(ph.has_steps, false) AND NOT coalesce(ph.has_decode, false)))
      AND (w.scenario <> 'fuse_top5' OR w.trace_id IN (SELECT trace_id FROM chains))
      AND (w.scenario <> 'lever_library_x2' OR w.trace_id IN (SELECT trace_id FROM libk WHERE has_library_time))
)
SELECT
    r.trace_id,
    r.scope_kind,
    r.scope_key,
    r.lever,
    r.side,
    r.scenario,
    r.label,
    CASE r.lever WHEN 'framework_translation' THEN ops.t WHEN 'library_translation' THEN libk.t
        WHEN 'top_kernels' THEN topk.t WHEN 'kernel_fusion' THEN chains.t END AS targets,
    r.il_own_ns,
    r.il_replay_ns,
    r.il_replay_ns - r.il_own_ns AS il_change_ns,
    100.0 * (r.il_replay_ns - r.il_own_ns) / r.il_own_ns AS il_change_pct,
    row_number() OVER (PARTITION BY r.trace_id, r.scope_kind, r.scope_key
                       ORDER BY r.il_replay_ns - r.il_own_ns, r.side DESC, r.lever) AS lever_rank
FROM r
LEFT JOIN ops ON ops.trace_id = r.trace_id
LEFT JOIN libk ON libk.trace_id = r.trace_id
LEFT JOIN topk ON topk.trace_id = r.trace_id
LEFT JOIN chains ON chains.trace_id = r.trace_id
