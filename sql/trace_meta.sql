-- table: trace_meta
-- grain: one row per analysed trace
-- reads: stg_catalogue, stg_meta_raw
-- description: Trace-level facts for the analyses: GPU and host from the catalogue, the taxbreak metadata (trace metadata key 'taxbreak' first, then the sidecar <trace>.meta.json; see docs/sidecar.md) and the null-kernel marker.
-- column: trace_id: trace key
-- column: file_name: source file name
-- column: source_format: adapter that ingested the trace
-- column: gpu_name: first GPU model name of the trace (catalogue gpu_names_json), else the metadata's gpu_name
-- column: host_name: host name when the trace records it
-- column: meta_source: where the taxbreak metadata came from: 'trace_metadata', 'sidecar' or NULL (none)
-- column: meta_note: why no metadata was used, when none was
-- column: side_file_errors: why side files found beside the trace at ingest were refused (the sidecar, the request list <trace>.requests.jsonl[.gz]), '; '-joined; NULL when none was (taxbreak.ingest.sidecar.side_file_errors)
-- column: model: model name from the metadata
-- column: model_kind: 'dense' or 'moe'
-- column: batch_size: batch size (requests): the metadata's batch_size, else its sweep block's
-- column: prompt_len: prompt length (tokens)
-- column: output_tokens: output tokens generated per request, m (tokens)
-- column: trace_kind: 'generation', 'null_kernel' or 'sweep_point' (metadata), 'null_kernel' also from the file name
-- column: is_null_kernel: the trace is a null-kernel floor measurement (metadata kind, or file name containing null_kernel / nullkernel)
-- column: is_synthetic: the metadata marks the trace as synthetic
-- column: sweep_name: name of the sweep the trace is a point of (metadata sweep.name); NULL when none
-- column: seq_len: sequence (prompt) length of the sweep point: sweep.seq_len, else prompt_len (tokens)
-- column: sweep_phase: phase the sweep point profiles, 'prefill' or 'decode' (sweep.phase); NULL when not given
-- column: meta_json: the whole metadata object (JSON)
SELECT
    c.trace_id,
    c.file_name,
    c.source_format,
    coalesce(nullif(json_extract_string(c.gpu_names_json, '$[0]'), ''), json_extract_string(m.meta_json, '$.gpu_name'))
        AS gpu_name,
    c.host_name,
    m.meta_source,
    m.meta_note,
    m.side_file_errors,
    json_extract_string(m.meta_json, '$.model') AS model,
    json_extract_string(m.meta_json, '$.model_kind') AS model_kind,
    coalesce(TRY_CAST(json_extract(m.meta_json, '$.batch_size') AS BIGINT),
             TRY_CAST(json_extract(m.meta_json, '$.sweep.batch_size') AS BIGINT)) AS batch_size,
    TRY_CAST(json_extract(m.meta_json, '$.prompt_len') AS BIGINT) AS prompt_len,
    TRY_CAST(json_extract(m.meta_json, '$.output_tokens') AS BIGINT) AS output_tokens,
    coalesce(
        json_extract_string(m.meta_json, '$.kind'),
        CASE WHEN regexp_matches(c.file_name, '(?i)null_?kernel') THEN 'null_kernel' END
    ) AS trace_kind,
    coalesce(json_extract_string(m.meta_json, '$.kind') = 'null_kernel', false)
        OR regexp_matches(c.file_name, '(?i)null_?kernel') AS is_null_kernel,
    coalesce(TRY_CAST(json_extract(m.meta_json, '$.synthetic') AS BOOLEAN), false) AS is_synthetic,
    nullif(json_extract_string(m.meta_json, '$.sweep.name'), '') AS sweep_name,
    coalesce(TRY_CAST(json_extract(m.meta_json, '$.sweep.seq_len') AS BIGINT),
             TRY_CAST(json_extract(m.meta_json, '$.prompt_len') AS BIGINT)) AS seq_len,
    json_extract_string(m.meta_json, '$.sweep.phase') AS sweep_phase,
    m.meta_json
FROM stg_catalogue c
LEFT JOIN stg_meta_raw m USING (trace_id)
