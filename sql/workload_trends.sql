-- table: workload_trends
-- grain: one row per analysed trace, as a run of its workload
-- reads: run_spec, skip_by_trace, taxbreak_by_scope, kernels_per_token, diagnosis
-- scope: cross_trace
-- partition_by: workload_id
-- description: Each workload's runs in capture order (docs/method.md "Trends and regressions", ours): the runs that share a workload key (run_spec) with the headline figures a regression is looked for in. Capture order is run_spec.capture_ts_ns (the trace's start, else the metadata's captured_at_ns, else the ingest time, as capture_ts_source says), ties by trace id. Per-token figures divide by the output tokens per request (kernels_per_token.output_tokens) and are NULL without them. Computed per workload (partition_by workload_id): a run for some traces recomputes only their workloads' rows, a run over every trace the whole table.
-- column: workload_id: the workload (run_spec.workload_id)
-- column: workload_key: the run-spec fields that define it
-- column: program: run_spec.program
-- column: run_seq: the run's position in its workload, 1 = the first captured (runs)
-- column: runs_in_workload: runs of the workload in the warehouse (runs)
-- column: trace_id: trace key
-- column: file_name: source file name
-- column: capture_ts_ns: capture time (epoch ns)
-- column: capture_ts_source: 'trace', 'metadata' or 'ingest_time'
-- column: il_ns: inference latency (skip_by_trace.il_ns) (ns)
-- column: t_orchestrate_ns: T_Orchestrate of the trace scope (ns)
-- column: delta_ft_ns: framework translation of the trace scope (ns)
-- column: delta_ct_ns: CUDA-library translation (ns)
-- column: delta_kt_ns: kernel launch path (ns)
-- column: t_device_active_ns: T_DeviceActive (ns)
-- column: kernels: kernel invocations of the trace (kernels)
-- column: output_tokens: output tokens per request (tokens)
-- column: t_orchestrate_per_token_ns: t_orchestrate_ns / output_tokens (ns)
-- column: delta_ft_per_token_ns: delta_ft_ns / output_tokens (ns)
-- column: delta_ct_per_token_ns: delta_ct_ns / output_tokens (ns)
-- column: delta_kt_per_token_ns: delta_kt_ns / output_tokens (ns)
-- column: kpt: kernels per output token (kernels per token)
-- column: hdbi_wall: HDBI_wall of the trace scope
-- column: gpu_idle_share: skip_by_trace.gpu_idle_merged_ns / il_ns
-- column: tklqt_per_launch_ns: TKLQT per launch sample, skip_by_trace.mean_launch_to_start_ns (ns)
-- column: verdict: the trace's bound (diagnosis, trace scope)
SELECT
    r.workload_id,
    r.workload_key,
    r.program,
    row_number() OVER (PARTITION BY r.workload_id ORDER BY r.capture_ts_ns, r.trace_id) AS run_seq,
    count(*) OVER (PARTITION BY r.workload_id) AS runs_in_workload,
    r.trace_id,
    r.file_name,
    r.capture_ts_ns,
    r.capture_ts_source,
    s.il_ns,
    t.t_orchestrate_ns,
    t.delta_ft_ns,
    t.delta_ct_ns,
    t.delta_kt_ns,
    t.t_device_active_ns,
    t.kernels,
    k.output_tokens,
    t.t_orchestrate_ns / nullif(k.output_tokens, 0) AS t_orchestrate_per_token_ns,
    t.delta_ft_ns / nullif(k.output_tokens, 0) AS delta_ft_per_token_ns,
    t.delta_ct_ns / nullif(k.output_tokens, 0) AS delta_ct_per_token_ns,
    t.delta_kt_ns / nullif(k.output_tokens, 0) AS delta_kt_per_token_ns,
    k.kpt,
    t.hdbi_wall,
    s.gpu_idle_merged_ns / nullif(s.il_ns, 0) AS gpu_idle_share,
    s.mean_launch_to_start_ns AS tklqt_per_launch_ns,
    d.bound AS verdict
FROM run_spec r
LEFT JOIN skip_by_trace s USING (trace_id)
LEFT JOIN taxbreak_by_scope t ON t.trace_id = r.trace_id AND t.scope_kind = 'trace'
LEFT JOIN kernels_per_token k USING (trace_id)
LEFT JOIN diagnosis d ON d.trace_id = r.trace_id AND d.scope_kind = 'trace'
