-- table: skip_by_trace
-- grain: one row per analysed trace (traces without kernels too, with the reason)
-- reads: int_kernel_links, int_busy_intervals, stg_events, selected_traces
-- description: SKIP metrics (METHOD.md section 6). TKLQT = sum of (kernel start - launch call start) over launch calls (one sample per launch; graph launches: their first kernel); rule (ours): negative samples are left out of TKLQT and reported apart (count and sum), nothing is clamped (SODA clamps -10..0 us to 0 and drops <= -10 us). AKD = mean kernel duration. IL = end of the last kernel - start of the first framework op; GPU idle = IL - merged kernel busy time inside the IL window, and IL - sum of kernel durations inside the window (SODA's form). Kernels that ran before the first framework op (warm-up leftovers) are clipped to the window (ours), so the merged form is never negative.
-- column: trace_id: trace key
-- column: launch_samples: launch calls with a kernel (launches)
-- column: tklqt_ns: sum of the non-negative launch-to-start samples (ns)
-- column: negative_samples: samples with kernel start before launch call start (launches)
-- column: negative_sum_ns: sum of the negative samples (ns)
-- column: mean_launch_to_start_ns: tklqt_ns / non-negative samples (ns)
-- column: kernels: kernels in the trace (kernels)
-- column: akd_ns: mean kernel duration (ns)
-- column: kernel_sum_ns: sum of kernel durations (ns)
-- column: kernel_busy_merged_ns: union of kernel intervals over all devices and streams (ns)
-- column: il_start_ns: start of the first framework op by the dispatcher-op rule (stg_events.is_dispatcher_op: cpu_op or NVTX range named ns::op; a wrapper such as `TorchDynamo Cache Lookup` never starts IL), else first launch call, else first kernel (ns)
-- column: il_start_basis: 'framework_op', 'launch_call' or 'kernel'
-- column: il_end_ns: end of the last kernel (ns)
-- column: il_ns: inference latency il_end_ns - il_start_ns (ns)
-- column: busy_in_il_ns: merged kernel busy time clipped to [il_start_ns, il_end_ns] (ns)
-- column: gpu_idle_merged_ns: il_ns - busy_in_il_ns, never negative (ns)
-- column: no_kernels_reason: why the kernel figures are empty ('no GPU kernels in the trace (host-only capture)'), NULL when the trace has kernels; the one place this wording is written
-- column: gpu_idle_sum_ns: il_ns - sum of kernel durations clipped to the IL window, SODA's form; negative when kernels overlap (ns)
WITH
samples AS (
    SELECT trace_id, kernel_ts_ns - launch_ts_ns AS d_ns
    FROM int_kernel_links WHERE has_launch AND is_charged_launch
),
t AS (
    SELECT
        trace_id,
        count(*) AS launch_samples,
        coalesce(sum(d_ns) FILTER (WHERE d_ns >= 0), 0) AS tklqt_ns,
        count(*) FILTER (WHERE d_ns < 0) AS negative_samples,
        coalesce(sum(d_ns) FILTER (WHERE d_ns < 0), 0) AS negative_sum_ns,
        avg(d_ns) FILTER (WHERE d_ns >= 0) AS mean_launch_to_start_ns
    FROM samples GROUP BY trace_id
),
k AS (
    SELECT trace_id, count(*) AS kernels, avg(kernel_dur_ns) AS akd_ns, sum(kernel_dur_ns) AS kernel_sum_ns,
           min(kernel_ts_ns) AS first_kernel_ns, max(kernel_end_ns) AS il_end_ns, min(launch_ts_ns) AS first_launch_ns
    FROM int_kernel_links GROUP BY trace_id
),
ops AS (
    SELECT trace_id, min(ts_ns) AS first_op_ns FROM stg_events WHERE is_dispatcher_op GROUP BY trace_id
),
-- merged busy time of all kernels of a trace (int_busy_intervals, set 'kernels': every GPU and stream)
merged AS (
    SELECT trace_id, sum(busy_end_ns - busy_start_ns) AS busy_ns
    FROM int_busy_intervals WHERE busy_set = 'kernels' GROUP BY trace_id
),
w AS (
    SELECT k.trace_id, coalesce(ops.first_op_ns, k.first_launch_ns, k.first_kernel_ns) AS il_start_ns,
           CASE WHEN ops.first_op_ns IS NOT NULL THEN 'framework_op' WHEN k.first_launch_ns IS NOT NULL
                THEN 'launch_call' ELSE 'kernel' END AS il_start_basis,
           k.il_end_ns
    FROM k LEFT JOIN ops USING (trace_id)
),
-- the window (one row per trace) joined to the intervals, not correlated subqueries: those became hash joins
-- whose build side was every interval under one trace_id key, which cannot be split to spill (10 M kernels ran
-- out of memory here)
busy_in AS (
    SELECT w.trace_id,
           sum(greatest(0, least(b.busy_end_ns, w.il_end_ns) - greatest(b.busy_start_ns, w.il_start_ns)))
               AS busy_in_il_ns
    FROM int_busy_intervals b JOIN w USING (trace_id) WHERE b.busy_set = 'kernels' GROUP BY w.trace_id
),
kernels_in AS (
    SELECT w.trace_id,
           sum(greatest(0, least(l.kernel_end_ns, w.il_end_ns) - greatest(l.kernel_ts_ns, w.il_start_ns)))
               AS kernel_sum_in_il_ns
    FROM int_kernel_links l JOIN w USING (trace_id) GROUP BY w.trace_id
),
in_window AS (
    SELECT w.trace_id, coalesce(bi.busy_in_il_ns, 0) AS busy_in_il_ns,
           coalesce(ki.kernel_sum_in_il_ns, 0) AS kernel_sum_in_il_ns
    FROM w LEFT JOIN busy_in bi USING (trace_id) LEFT JOIN kernels_in ki USING (trace_id)
)
SELECT
    s.trace_id,
    coalesce(t.launch_samples, 0) AS launch_samples,
    CAST(coalesce(t.tklqt_ns, 0) AS BIGINT) AS tklqt_ns,
    coalesce(t.negative_samples, 0) AS negative_samples,
    CAST(coalesce(t.negative_sum_ns, 0) AS BIGINT) AS negative_sum_ns,
    t.mean_launch_to_start_ns,
    coalesce(k.kernels, 0) AS kernels,
    k.akd_ns,
    CAST(k.kernel_sum_ns AS BIGINT) AS kernel_sum_ns,
    CAST(m.busy_ns AS BIGINT) AS kernel_busy_merged_ns,
    w.il_start_ns,
    w.il_start_basis,
    w.il_end_ns,
    w.il_end_ns - w.il_start_ns AS il_ns,
    CAST(iw.busy_in_il_ns AS BIGINT) AS busy_in_il_ns,
    CAST(w.il_end_ns - w.il_start_ns - iw.busy_in_il_ns AS BIGINT) AS gpu_idle_merged_ns,
    CAST(w.il_end_ns - w.il_start_ns - iw.kernel_sum_in_il_ns AS BIGINT) AS gpu_idle_sum_ns,
    CASE WHEN k.trace_id IS NULL THEN 'no GPU kernels in the trace (host-only capture)' END AS no_kernels_reason
FROM selected_traces s
LEFT JOIN k USING (trace_id)
LEFT JOIN w USING (trace_id)
LEFT JOIN t USING (trace_id)
LEFT JOIN merged m USING (trace_id)
LEFT JOIN in_window iw USING (trace_id)
