-- table: launch_floor_measurements
-- grain: one row per null-kernel trace (trace_meta.is_null_kernel)
-- reads: int_kernel_links, trace_meta, run_config
-- scope: all_traces
-- description: The measured launch floor T_sys of a null-kernel trace (METHOD.md section 4): mean of kernel start minus launch call start over the launched kernels in launch order, skipping the first run_config.null_kernel_warmup (20) as warm-up.
-- column: trace_id: the null-kernel trace
-- column: gpu_name: its GPU model
-- column: host_name: its host
-- column: samples: measured launches used (launches)
-- column: warmup_skipped: warm-up launches skipped (launches)
-- column: t_sys_mean_ns: mean launch-to-start, the T_sys floor (ns)
-- column: t_sys_min_ns: minimum (ns)
-- column: t_sys_p50_ns: median, lower middle sample (ns)
-- column: t_sys_max_ns: maximum (ns)
-- column: t_sys_std_ns: sample standard deviation (ns)
WITH s AS (
    SELECT
        k.trace_id,
        t.gpu_name,
        t.host_name,
        k.kernel_ts_ns - k.launch_ts_ns AS d_ns,
        row_number() OVER (PARTITION BY k.trace_id ORDER BY k.launch_ts_ns, k.kernel_seq) AS n
    FROM int_kernel_links k
    JOIN trace_meta t USING (trace_id)
    WHERE t.is_null_kernel AND k.has_launch AND k.is_charged_launch
)
SELECT
    s.trace_id,
    any_value(s.gpu_name) AS gpu_name,
    any_value(s.host_name) AS host_name,
    count(*) AS samples,
    any_value(c.null_kernel_warmup) AS warmup_skipped,
    CAST(round(avg(d_ns)) AS BIGINT) AS t_sys_mean_ns,
    min(d_ns) AS t_sys_min_ns,
    quantile_disc(d_ns, 0.5) AS t_sys_p50_ns,
    max(d_ns) AS t_sys_max_ns,
    stddev_samp(d_ns) AS t_sys_std_ns
FROM s
CROSS JOIN run_config c
WHERE s.n > c.null_kernel_warmup
GROUP BY s.trace_id
