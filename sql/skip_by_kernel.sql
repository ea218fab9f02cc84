-- table: skip_by_kernel
-- grain: one row per trace and kernel name
-- reads: int_kernel_links
-- description: Per kernel name (METHOD.md section 6): invocations, total and mean duration (AKD per kernel), launch-to-start, and the top-k ranks by count and by total time.
-- column: trace_id: trace key
-- column: kernel_name: kernel name
-- column: invocations: kernel invocations (kernels)
-- column: total_dur_ns: sum of durations (ns)
-- column: akd_ns: mean duration (ns)
-- column: min_dur_ns: shortest invocation (ns)
-- column: max_dur_ns: longest invocation (ns)
-- column: time_share: total_dur_ns / all kernel time of the trace
-- column: mean_launch_to_start_ns: mean kernel start - launch call start over invocations that carry their launch (ns)
-- column: rank_by_count: 1 = most invocations (ties by name)
-- column: rank_by_time: 1 = most total time (ties by name)
SELECT
    trace_id,
    kernel_name,
    count(*) AS invocations,
    CAST(sum(kernel_dur_ns) AS BIGINT) AS total_dur_ns,
    avg(kernel_dur_ns) AS akd_ns,
    min(kernel_dur_ns) AS min_dur_ns,
    max(kernel_dur_ns) AS max_dur_ns,
    sum(kernel_dur_ns) / nullif(sum(sum(kernel_dur_ns)) OVER (PARTITION BY trace_id), 0) AS time_share,
    avg(kernel_ts_ns - launch_ts_ns) FILTER (WHERE is_charged_launch) AS mean_launch_to_start_ns,
    row_number() OVER (PARTITION BY trace_id ORDER BY count(*) DESC, kernel_name) AS rank_by_count,
    row_number() OVER (PARTITION BY trace_id ORDER BY sum(kernel_dur_ns) DESC, kernel_name) AS rank_by_time
FROM int_kernel_links
GROUP BY trace_id, kernel_name
