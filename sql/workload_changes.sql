-- table: workload_changes
-- grain: one row per change point: a run of a workload where one headline figure moved beyond the workload's run-to-run spread
-- reads: workload_trends, run_spec, taxbreak_by_scope
-- scope: cross_trace
-- partition_by: workload_id
-- description: Regressions and improvements with noise taken into account (docs/method.md "Trends and regressions", ours). Per workload and figure of workload_trends, a run's baseline is the previous trends.window_runs runs: their median and robust sigma (1.4826 x MAD). The run is a change point when (1) at least trends.min_runs previous runs exist, (2) the median of this run and the next ones (trends.confirm_runs; fewer when the series ends there: then 'provisional', and the threshold grows by sqrt(confirm_runs / runs)) differs from the baseline median by more than trends.mad_k sigmas and by at least trends.min_rel_change of the median, (3) this run itself moved the same way and lies nearer that new level than the baseline median (the shift starts here, not one noisy run earlier), and (4) among the runs that moved the same way within trends.window_runs of each other it best splits the series: the largest difference between the mean of it and the next confirm_runs - 1 runs and the mean of the confirm_runs runs before it (one shift, one row, at its start). The settings are the newest run's of the workload (run_spec). Higher is worse for every figure but hdbi_wall, whose move is 'changed'. Each row names what moved with it: the other component figures that are change points at the same run, and the framework ops and kernels whose time changed most from the previous run. Computed per workload (partition_by workload_id): a run for some traces recomputes only their workloads' rows.
-- column: workload_id: the workload (run_spec.workload_id)
-- column: program: run_spec.program
-- column: trace_id: the run where the figure moved
-- column: file_name: its file name
-- column: run_seq: its position in the workload (runs)
-- column: figure: the workload_trends column that moved
-- column: value: the figure in this run (the figure's unit)
-- column: baseline_median: median over the baseline runs (the figure's unit)
-- column: baseline_sigma: robust sigma 1.4826 x MAD of the baseline runs (the figure's unit)
-- column: baseline_runs: runs in the baseline (runs)
-- column: confirm_median: median of this run and the confirming runs after it (the figure's unit)
-- column: confirm_runs: runs that median is over, this one included (runs)
-- column: rel_change: (confirm_median - baseline_median) / |baseline_median|
-- column: robust_z: (confirm_median - baseline_median) / baseline_sigma; NULL when the sigma is 0
-- column: direction: 'regression', 'improvement' or 'changed' (hdbi_wall)
-- column: status: 'confirmed' (trends.confirm_runs runs agree) or 'provisional' (the series ends before that)
-- column: components_moved: the other component figures (delta_ft_ns, delta_ct_ns, delta_kt_ns, t_device_active_ns, kernels, il_ns, t_orchestrate_ns) whose median from this run on differs from their baseline median by more than trends.mad_k sigmas, with their relative change ('t_orchestrate_ns +6.2%'), largest first
-- column: top_ops: the three framework ops whose delta_ft + delta_ct changed most from the previous run: op, change (ns)
-- column: top_kernels: the three kernel names whose device time changed most from the previous run: kernel, change (ns)
WITH
cfg AS (
    SELECT workload_id,
           arg_max(trends_window_runs, capture_ts_ns) AS window_runs,
           arg_max(trends_min_runs, capture_ts_ns) AS min_runs,
           arg_max(trends_mad_k, capture_ts_ns) AS mad_k,
           arg_max(trends_min_rel_change, capture_ts_ns) AS min_rel,
           arg_max(trends_confirm_runs, capture_ts_ns) AS confirm
    FROM run_spec GROUP BY workload_id
),
long AS (
    UNPIVOT (
        SELECT workload_id, trace_id, run_seq,
               CAST(il_ns AS DOUBLE) AS il_ns, CAST(t_orchestrate_ns AS DOUBLE) AS t_orchestrate_ns,
               CAST(delta_ft_ns AS DOUBLE) AS delta_ft_ns, CAST(delta_ct_ns AS DOUBLE) AS delta_ct_ns,
               CAST(delta_kt_ns AS DOUBLE) AS delta_kt_ns, CAST(t_device_active_ns AS DOUBLE) AS t_device_active_ns,
               CAST(kernels AS DOUBLE) AS kernels, CAST(kpt AS DOUBLE) AS kpt, CAST(hdbi_wall AS DOUBLE) AS hdbi_wall,
               CAST(gpu_idle_share AS DOUBLE) AS gpu_idle_share,
               CAST(tklqt_per_launch_ns AS DOUBLE) AS tklqt_per_launch_ns
        FROM workload_trends WHERE runs_in_workload > 1
    ) ON il_ns, t_orchestrate_ns, delta_ft_ns, delta_ct_ns, delta_kt_ns, t_device_active_ns, kernels, kpt, hdbi_wall,
         gpu_idle_share, tklqt_per_launch_ns
    INTO NAME figure VALUE value
),
-- the runs around each run, as equality joins on (workload, figure, run_seq + offset): the cost is linear in the
-- runs (a band condition would pair every two runs of a workload first)
offs AS (SELECT workload_id, unnest(range(1, window_runs + 1)) AS off FROM cfg),
coffs AS (SELECT workload_id, unnest(range(0, confirm)) AS off FROM cfg),
-- (materialised: each run's neighbour positions first, so the join below is on (workload, figure, run_seq))
window_idx AS MATERIALIZED (
    SELECT r.workload_id, r.trace_id, r.run_seq, r.figure, r.value, r.run_seq - o.off AS prev_seq
    FROM long r JOIN offs o USING (workload_id)
),
window_pairs AS (
    SELECT x.workload_id, x.trace_id, x.run_seq, x.figure, x.value, p.value AS prev_value
    FROM window_idx x
    JOIN long p ON p.workload_id = x.workload_id AND p.figure = x.figure AND p.run_seq = x.prev_seq
),
confirm_idx AS MATERIALIZED (
    SELECT r.workload_id, r.trace_id, r.figure, r.run_seq + o.off AS next_seq
    FROM long r JOIN coffs o USING (workload_id)
),
base AS (
    SELECT workload_id, trace_id, run_seq, figure, value, median(prev_value) AS med, count(*) AS n
    FROM window_pairs GROUP BY ALL
),
spread AS (
    SELECT b.workload_id, b.trace_id, b.run_seq, b.figure, b.value, b.med, b.n,
           1.4826 * median(abs(w.prev_value - b.med)) AS sigma
    FROM base b JOIN window_pairs w USING (workload_id, trace_id, figure)
    GROUP BY ALL
),
confirm AS (
    SELECT x.workload_id, x.trace_id, x.figure, median(q.value) AS confirm_value, count(q.value) AS confirm_n
    FROM confirm_idx x
    JOIN long q ON q.workload_id = x.workload_id AND q.figure = x.figure AND q.run_seq = x.next_seq
    GROUP BY ALL
),
judged AS (
    SELECT s.*, f.confirm_value, f.confirm_n, c.window_runs, c.confirm, c.mad_k, f.confirm_value - s.med AS shift,
           s.n >= c.min_runs
           -- the median of fewer confirming runs (the series ends) is noisier: its threshold grows by
           -- sqrt(confirm / runs), so the newest run alone needs sqrt(confirm) times the sigmas
           AND abs(f.confirm_value - s.med) > c.mad_k * s.sigma * sqrt(c.confirm / f.confirm_n)
           AND abs(f.confirm_value - s.med) >= c.min_rel * abs(s.med)
           AND abs(f.confirm_value - s.med) > 0
           -- the run itself is on the new level: moved the same way, and nearer the new level than the old
           AND sign(s.value - s.med) = sign(f.confirm_value - s.med)
           AND abs(s.value - s.med) > abs(s.value - f.confirm_value) AS moved
    FROM spread s JOIN confirm f USING (workload_id, trace_id, figure) JOIN cfg c USING (workload_id)
),
-- the change point of a shift: among the runs that moved the same way within a window of each other, the one that
-- best splits the series, the largest |mean of it and the next confirm-1 runs - mean of the confirm runs before|
split AS (
    SELECT j.workload_id, j.trace_id, j.figure,
           abs(avg(a.value) - avg(b.value)) AS split_score
    FROM (SELECT * FROM judged WHERE moved) j
    JOIN confirm_idx ia ON ia.workload_id = j.workload_id AND ia.trace_id = j.trace_id AND ia.figure = j.figure
    JOIN long a ON a.workload_id = j.workload_id AND a.figure = j.figure AND a.run_seq = ia.next_seq
    JOIN confirm_idx ib ON ib.workload_id = j.workload_id AND ib.trace_id = j.trace_id AND ib.figure = j.figure
    JOIN long b ON b.workload_id = j.workload_id AND b.figure = j.figure
               AND b.run_seq = 2 * j.run_seq - 1 - ib.next_seq
    GROUP BY ALL
),
clustered AS (
    SELECT j.*, s.split_score,
           max(s.split_score) OVER (PARTITION BY j.workload_id, j.figure, sign(j.shift) ORDER BY j.run_seq
                                    RANGE BETWEEN j.window_runs PRECEDING AND j.window_runs FOLLOWING) AS best_score
    FROM judged j JOIN split s USING (workload_id, trace_id, figure)
),
points AS (
    SELECT * FROM clustered WHERE split_score = best_score
),
prev AS (
    SELECT p.workload_id, p.trace_id, w.trace_id AS prev_trace_id
    FROM (SELECT DISTINCT workload_id, trace_id, run_seq FROM points) p
    JOIN workload_trends w ON w.workload_id = p.workload_id AND w.run_seq = p.run_seq - 1
),
op_delta AS (
    SELECT pr.trace_id, coalesce(a.scope_key, b.scope_key) AS op,
           coalesce(a.delta_ft_ns + a.delta_ct_ns, 0) - coalesce(b.delta_ft_ns + b.delta_ct_ns, 0) AS change_ns
    FROM prev pr
    JOIN (SELECT * FROM taxbreak_by_scope WHERE scope_kind = 'op') a ON a.trace_id = pr.trace_id
    FULL JOIN (SELECT * FROM taxbreak_by_scope WHERE scope_kind = 'op') b
      ON b.trace_id = pr.prev_trace_id AND b.scope_key = a.scope_key
),
kernel_delta AS (
    SELECT pr.trace_id, coalesce(a.scope_key, b.scope_key) AS kernel,
           coalesce(a.t_device_active_ns, 0) - coalesce(b.t_device_active_ns, 0) AS change_ns
    FROM prev pr
    JOIN (SELECT * FROM taxbreak_by_scope WHERE scope_kind = 'kernel') a ON a.trace_id = pr.trace_id
    FULL JOIN (SELECT * FROM taxbreak_by_scope WHERE scope_kind = 'kernel') b
      ON b.trace_id = pr.prev_trace_id AND b.scope_key = a.scope_key
),
tops AS (
    SELECT trace_id,
           max_by({'op': op, 'change_ns': CAST(change_ns AS BIGINT)}, abs(change_ns), 3) AS top_ops
    FROM op_delta WHERE trace_id IS NOT NULL AND change_ns <> 0 GROUP BY trace_id
),
topk AS (
    SELECT trace_id,
           max_by({'kernel': kernel, 'change_ns': CAST(change_ns AS BIGINT)}, abs(change_ns), 3) AS top_kernels
    FROM kernel_delta WHERE trace_id IS NOT NULL AND change_ns <> 0 GROUP BY trace_id
),
moved_with AS (
    SELECT p.workload_id, p.trace_id, p.figure,
           list(j.figure || ' ' || CASE WHEN j.shift > 0 THEN '+' ELSE '' END
                || printf('%.1f', 100 * j.shift / nullif(abs(j.med), 0)) || '%' ORDER BY abs(j.shift / nullif(j.med, 0)) DESC)
               AS components_moved
    FROM points p
    JOIN judged j ON j.workload_id = p.workload_id AND j.trace_id = p.trace_id AND j.figure <> p.figure
     AND j.n > 0 AND abs(j.shift) > j.mad_k * j.sigma
     AND j.figure IN ('delta_ft_ns', 'delta_ct_ns', 'delta_kt_ns', 't_device_active_ns', 'kernels', 'il_ns',
                      't_orchestrate_ns')
    GROUP BY ALL
)
SELECT
    p.workload_id,
    w.program,
    p.trace_id,
    w.file_name,
    p.run_seq,
    p.figure,
    p.value,
    p.med AS baseline_median,
    p.sigma AS baseline_sigma,
    p.n AS baseline_runs,
    p.confirm_value AS confirm_median,
    p.confirm_n AS confirm_runs,
    p.shift / nullif(abs(p.med), 0) AS rel_change,
    p.shift / nullif(p.sigma, 0) AS robust_z,
    CASE WHEN p.figure = 'hdbi_wall' THEN 'changed' WHEN p.shift > 0 THEN 'regression' ELSE 'improvement' END
        AS direction,
    CASE WHEN p.confirm_n >= p.confirm THEN 'confirmed' ELSE 'provisional' END AS status,
    coalesce(m.components_moved, []) AS components_moved,
    t.top_ops,
    k.top_kernels
FROM points p
JOIN workload_trends w USING (workload_id, trace_id)
LEFT JOIN moved_with m USING (workload_id, trace_id, figure)
LEFT JOIN tops t USING (trace_id)
LEFT JOIN topk k USING (trace_id)
