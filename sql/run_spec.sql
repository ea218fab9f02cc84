-- table: run_spec
-- grain: one row per analysed trace
-- reads: trace_meta, stg_catalogue, int_steps, trace_launch_floor, run_config
-- description: What makes two runs comparable (docs/method.md "Trends and regressions", ours): per trace the run-spec fields, each with where it came from (field_sources), the workload key built from the fields the setting trends.workload_key names (run_config.workload_key_fields), and the capture time runs are ordered by. Fields a trace does not state are NULL and count as one value '?' in the key, so two traces that both lack a field still compare. Beside them the trends settings of the run that analysed the trace, which workload_changes applies (the newest run's settings for a workload).
-- column: trace_id: trace key
-- column: file_name: source file name
-- column: program: what ran: the metadata's program, else its model, else the file name's stem without trailing run numbers, timestamps, ranks or suffixes ('worker0.1623143089861.pt.trace.json' -> 'worker0', 'benchmark_result_924719_1679055439_trace.json.gz' -> 'benchmark_result'), lower case
-- column: model: model name from the metadata
-- column: gpu_name: GPU model: the trace's, else the one inferred from its kernel names (trace_launch_floor)
-- column: gpu_count: GPUs that ran kernels (catalogue kernel_gpu_count)
-- column: host_cpu: host CPU model when the metadata states it
-- column: dtype: compute data type when the metadata states it
-- column: batch_size: batch size (requests)
-- column: seq_len: sequence (prompt) length (tokens)
-- column: output_tokens: output tokens per request (tokens)
-- column: phase_mix: the step phases present, sorted and joined by '+' ('decode+prefill'); 'unknown' when the steps name no phase, 'no_steps' without step annotations
-- column: trace_kind: trace_meta.trace_kind, 'profile' when the metadata gives none
-- column: torch_version: PyTorch version when the metadata or the trace states it
-- column: cuda_version: CUDA (or HIP) runtime version the trace records
-- column: engine: serving engine: the metadata's, else 'sglang' or 'vllm' from the step annotations (int_steps.step_rule), else from the file name
-- column: engine_version: engine version when the metadata states it
-- column: t_sys_source: trace_launch_floor.t_sys_source (measured, default, user_setting)
-- column: capture_tool: 'torch.profiler' (Kineto JSON) or 'nsys' (Nsight Systems)
-- column: capture_tool_version: the capture tool's version the trace records (Kineto schemaVersion, the nsys version)
-- column: field_sources: where each non-NULL field came from: 'metadata' (the trace's taxbreak metadata or its sidecar), 'trace' (the trace file itself), 'kernel_names', 'steps', 'file_name', 'analysis', 'default'
-- column: workload_key: the configured run-spec fields as 'field=value' joined by '|' (NULL values as '?')
-- column: workload_id: the first 12 hex digits of md5(workload_key)
-- column: capture_ts_ns: when the run was captured: the trace's start (epoch ns), else the metadata's captured_at_ns, else the ingest time (ns)
-- column: capture_ts_source: 'trace', 'metadata' or 'ingest_time'
-- column: trends_window_runs: setting trends.window_runs of the run that analysed the trace (runs)
-- column: trends_min_runs: setting trends.min_runs (runs)
-- column: trends_mad_k: setting trends.mad_k
-- column: trends_min_rel_change: setting trends.min_rel_change
-- column: trends_confirm_runs: setting trends.confirm_runs (runs)
WITH
meta AS (
    SELECT m.trace_id, m.file_name, m.model, m.gpu_name, m.batch_size, m.seq_len, m.output_tokens, m.trace_kind,
           m.source_format, m.meta_json, c.tool_versions_json, c.metadata_json AS trace_json, c.kernel_gpu_count,
           c.start_epoch_ns, c.ingested_at_ns
    FROM trace_meta m JOIN stg_catalogue c USING (trace_id)
),
phases AS (
    SELECT trace_id,
           coalesce(string_agg(DISTINCT phase, '+' ORDER BY phase) FILTER (WHERE phase IS NOT NULL), 'unknown')
               AS phase_mix,
           -- the engine its step annotations name (sql/int_steps.sql rules); SGLang also writes vLLM-style ones
           CASE WHEN bool_or(step_rule LIKE 'sglang%') THEN 'sglang' WHEN bool_or(step_rule LIKE 'vllm%') THEN 'vllm'
           END AS step_engine
    FROM int_steps GROUP BY trace_id
),
f AS (
    SELECT
        m.trace_id, m.file_name,
        coalesce(json_extract_string(m.meta_json, '$.program'), m.model,
                 regexp_replace(regexp_replace(lower(m.file_name), '([._-](pt|trace|json|gz|sqlite|nsys-rep|kineto))+$', ''),
                                '([._-]+(rank|r)?[0-9]+)+$', '')) AS program,
        CASE WHEN json_extract_string(m.meta_json, '$.program') IS NOT NULL OR m.model IS NOT NULL THEN 'metadata'
             ELSE 'file_name' END AS program_src,
        m.model,
        coalesce(nullif(m.gpu_name, ''), lf.inferred_gpu_name) AS gpu_name,
        CASE WHEN nullif(m.gpu_name, '') IS NOT NULL THEN 'trace' WHEN lf.inferred_gpu_name IS NOT NULL
             THEN 'kernel_names' END AS gpu_name_src,
        m.kernel_gpu_count AS gpu_count,
        json_extract_string(m.meta_json, '$.host_cpu') AS host_cpu,
        json_extract_string(m.meta_json, '$.dtype') AS dtype,
        m.batch_size, m.seq_len, m.output_tokens,
        coalesce(p.phase_mix, 'no_steps') AS phase_mix,
        coalesce(m.trace_kind, 'profile') AS trace_kind,
        coalesce(json_extract_string(m.meta_json, '$.torch_version'),
                 json_extract_string(m.tool_versions_json, '$.torch_version'),
                 json_extract_string(m.tool_versions_json, '$.pytorch_version')) AS torch_version,
        CASE WHEN json_extract_string(m.meta_json, '$.torch_version') IS NOT NULL THEN 'metadata' ELSE 'trace' END
            AS torch_version_src,
        coalesce(json_extract_string(m.tool_versions_json, '$.cuda_runtime_version'),
                 json_extract_string(m.tool_versions_json, '$.hip_runtime_version'),
                 json_extract_string(m.meta_json, '$.cuda_version')) AS cuda_version,
        CASE WHEN coalesce(json_extract_string(m.tool_versions_json, '$.cuda_runtime_version'),
                           json_extract_string(m.tool_versions_json, '$.hip_runtime_version')) IS NOT NULL
             THEN 'trace' ELSE 'metadata' END AS cuda_version_src,
        coalesce(json_extract_string(m.meta_json, '$.engine'), p.step_engine,
                 CASE WHEN regexp_matches(lower(m.file_name), 'sglang') THEN 'sglang'
                      WHEN regexp_matches(lower(m.file_name), 'vllm') THEN 'vllm' END) AS engine,
        CASE WHEN json_extract_string(m.meta_json, '$.engine') IS NOT NULL THEN 'metadata'
             WHEN p.step_engine IS NOT NULL THEN 'steps' ELSE 'file_name' END AS engine_src,
        json_extract_string(m.meta_json, '$.engine_version') AS engine_version,
        lf.t_sys_source,
        CASE WHEN m.source_format = 'kineto' THEN 'torch.profiler' ELSE 'nsys' END AS capture_tool,
        coalesce(json_extract_string(m.tool_versions_json, '$.nsys_version'),
                 json_extract_string(m.tool_versions_json, '$.version'),
                 CASE WHEN json_extract_string(m.tool_versions_json, '$.schemaVersion') IS NOT NULL
                      THEN 'schema ' || json_extract_string(m.tool_versions_json, '$.schemaVersion') END)
            AS capture_tool_version,
        CASE WHEN m.start_epoch_ns IS NOT NULL THEN m.start_epoch_ns
             WHEN TRY_CAST(json_extract(m.meta_json, '$.captured_at_ns') AS BIGINT) IS NOT NULL
             THEN TRY_CAST(json_extract(m.meta_json, '$.captured_at_ns') AS BIGINT)
             ELSE m.ingested_at_ns END AS capture_ts_ns,
        CASE WHEN m.start_epoch_ns IS NOT NULL THEN 'trace'
             WHEN TRY_CAST(json_extract(m.meta_json, '$.captured_at_ns') AS BIGINT) IS NOT NULL THEN 'metadata'
             ELSE 'ingest_time' END AS capture_ts_source
    FROM meta m
    LEFT JOIN phases p USING (trace_id)
    LEFT JOIN trace_launch_floor lf USING (trace_id)
),
v AS (
    SELECT f.*,
           map_from_entries([
               ('program', program), ('model', model), ('gpu_name', gpu_name), ('gpu_count', CAST(gpu_count AS VARCHAR)),
               ('host_cpu', host_cpu), ('dtype', dtype), ('batch_size', CAST(batch_size AS VARCHAR)),
               ('seq_len', CAST(seq_len AS VARCHAR)), ('output_tokens', CAST(output_tokens AS VARCHAR)),
               ('phase_mix', phase_mix), ('trace_kind', trace_kind), ('torch_version', torch_version),
               ('cuda_version', cuda_version), ('engine', engine), ('engine_version', engine_version),
               ('t_sys_source', t_sys_source), ('capture_tool', capture_tool),
               ('capture_tool_version', capture_tool_version)]) AS vals,
           map_from_entries(list_filter([
               ('program', program_src), ('model', CASE WHEN model IS NOT NULL THEN 'metadata' END),
               ('gpu_name', gpu_name_src), ('gpu_count', CASE WHEN gpu_count IS NOT NULL THEN 'trace' END),
               ('host_cpu', CASE WHEN host_cpu IS NOT NULL THEN 'metadata' END),
               ('dtype', CASE WHEN dtype IS NOT NULL THEN 'metadata' END),
               ('batch_size', CASE WHEN batch_size IS NOT NULL THEN 'metadata' END),
               ('seq_len', CASE WHEN seq_len IS NOT NULL THEN 'metadata' END),
               ('output_tokens', CASE WHEN output_tokens IS NOT NULL THEN 'metadata' END),
               ('phase_mix', CASE WHEN phase_mix = 'no_steps' THEN 'default' ELSE 'steps' END),
               ('trace_kind', CASE WHEN trace_kind = 'profile' THEN 'default' ELSE 'metadata' END),
               ('torch_version', CASE WHEN torch_version IS NOT NULL THEN torch_version_src END),
               ('cuda_version', CASE WHEN cuda_version IS NOT NULL THEN cuda_version_src END),
               ('engine', CASE WHEN engine IS NOT NULL THEN engine_src END),
               ('engine_version', CASE WHEN engine_version IS NOT NULL THEN 'metadata' END),
               ('t_sys_source', 'analysis'), ('capture_tool', 'trace'),
               ('capture_tool_version', CASE WHEN capture_tool_version IS NOT NULL THEN 'trace' END)],
               lambda e: e[2] IS NOT NULL)) AS field_sources
    FROM f
)
SELECT
    v.trace_id, v.file_name, v.program, v.model, v.gpu_name, v.gpu_count, v.host_cpu, v.dtype, v.batch_size,
    v.seq_len, v.output_tokens, v.phase_mix, v.trace_kind, v.torch_version, v.cuda_version, v.engine,
    v.engine_version, v.t_sys_source, v.capture_tool, v.capture_tool_version, v.field_sources,
    k.workload_key,
    md5(k.workload_key)[1:12] AS workload_id,
    v.capture_ts_ns, v.capture_ts_source,
    c.trends_window_runs, c.trends_min_runs, c.trends_mad_k, c.trends_min_rel_change, c.trends_confirm_runs
FROM v CROSS JOIN run_config c
CROSS JOIN LATERAL (
    SELECT array_to_string(list_transform(string_split(c.workload_key_fields, ','),
                                          lambda f: trim(f) || '=' || coalesce(v.vals[trim(f)], '?')), '|')
               AS workload_key
) k
