-- table: sweep_points
-- grain: one row per trace that is a point of a batch-size sweep (traces of one sweep key at two or more batch sizes)
-- reads: trace_meta, taxbreak_by_scope, skip_by_trace, kernels_per_token
-- scope: cross_trace
-- description: Batch-size sweeps (METHOD.md section 6): the traces of one workload at growing batch size with their trace-level HDBI, T_Orchestrate, T_DeviceActive, TKLQT, kernels per token and IL. The sweep key is the metadata's sweep name, else model + sequence length + phase; null-kernel traces and traces without a batch size are no points. Computed over every trace in the warehouse: a run for some traces recomputes the whole table.
-- column: sweep_key: the sweep: sweep_name, else 'model sl<seq_len> <phase>' with unknown parts left out
-- column: sweep_key_source: 'sweep_name' (metadata sweep.name) or 'model_seq_len_phase'
-- column: trace_id: trace key
-- column: file_name: source file name
-- column: model: model name from the metadata
-- column: model_kind: 'dense' or 'moe'
-- column: seq_len: sequence (prompt) length (tokens)
-- column: phase: phase of the sweep point ('prefill', 'decode'); NULL for whole generations
-- column: batch_size: batch size (requests)
-- column: batch_rank: 1 for the sweep's smallest batch size, 2 for the next, ... (equal batch sizes share a rank)
-- column: kernels: kernels in the trace (kernels)
-- column: tklqt_ns: TKLQT of the trace, skip_by_trace.tklqt_ns (ns)
-- column: hdbi: trace-scope HDBI
-- column: hdbi_linked: trace-scope HDBI over linked kernels only
-- column: t_orchestrate_ns: trace-scope T_Orchestrate (ns)
-- column: t_device_active_ns: trace-scope T_DeviceActive (ns)
-- column: kpt: kernels per output token, paper-compatible (kernels per token)
-- column: il_ns: inference latency, skip_by_trace.il_ns (ns)
-- column: is_synthetic: the metadata marks the trace as synthetic
WITH
p AS (
    SELECT
        m.trace_id, m.file_name, m.model, m.model_kind, m.seq_len, m.sweep_phase AS phase, m.batch_size,
        m.is_synthetic,
        coalesce(m.sweep_name, concat_ws(' ', m.model, 'sl' || CAST(m.seq_len AS VARCHAR), m.sweep_phase))
            AS sweep_key,
        CASE WHEN m.sweep_name IS NOT NULL THEN 'sweep_name' ELSE 'model_seq_len_phase' END AS sweep_key_source
    FROM trace_meta m
    WHERE NOT m.is_null_kernel AND m.batch_size IS NOT NULL AND (m.sweep_name IS NOT NULL OR m.model IS NOT NULL)
),
sweeps AS (
    SELECT sweep_key FROM p GROUP BY sweep_key HAVING count(DISTINCT batch_size) >= 2
)
SELECT
    p.sweep_key,
    p.sweep_key_source,
    p.trace_id,
    p.file_name,
    p.model,
    p.model_kind,
    p.seq_len,
    p.phase,
    p.batch_size,
    dense_rank() OVER (PARTITION BY p.sweep_key ORDER BY p.batch_size) AS batch_rank,
    coalesce(s.kernels, 0) AS kernels,
    s.tklqt_ns,
    t.hdbi,
    t.hdbi_linked,
    t.t_orchestrate_ns,
    t.t_device_active_ns,
    k.kpt,
    s.il_ns,
    p.is_synthetic
FROM p
JOIN sweeps USING (sweep_key)
LEFT JOIN taxbreak_by_scope t ON t.trace_id = p.trace_id AND t.scope_kind = 'trace'
LEFT JOIN skip_by_trace s ON s.trace_id = p.trace_id
LEFT JOIN kernels_per_token k ON k.trace_id = p.trace_id
