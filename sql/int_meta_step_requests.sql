-- table: int_meta_step_requests
-- grain: one row per request listed in a step of a trace's request list (<trace>.requests.jsonl[.gz], stored at ingest) or, for a trace without one, of its taxbreak metadata (steps[].requests[], docs/sidecar.md)
-- reads: stg_meta_raw, stg_request_lists
-- materialize: temp
-- description: The batch composition the request list or the metadata gives for serving steps (a trace's request list, when it has one, replaces its metadata's lists; ours): which requests ran in the step named step_name, how many tokens each processed and the context it attended. Read by serving_steps (per-step sums) and serving_step_requests (per request).
-- column: trace_id: trace key
-- column: step_name: annotation name of the step (matched to user annotation / NVTX range names)
-- column: request_index: 0-based position of the request in the step's requests list
-- column: request_id: request id as the engine named it
-- column: tenant: tenant of the request; NULL when not given
-- column: request_phase: 'prefill' (the request's prompt or a chunk of it) or 'decode'
-- column: tokens: tokens the request processed in this step, p_i: the prompt chunk in prefill, 1 in decode (tokens)
-- column: context_tokens: tokens already in the request's KV cache before the step, c_i (tokens)
-- column: output_tokens: tokens the step emitted for the request (0 or 1); NULL when not given (tokens)
WITH s AS (
    SELECT trace_id, unnest(CAST(json_extract(meta_json, '$.steps') AS JSON[])) AS step
    FROM stg_meta_raw
    WHERE meta_json IS NOT NULL AND json_array_length(json_extract(meta_json, '$.steps')) > 0
),
r AS (
    SELECT trace_id, json_extract_string(step, '$.name') AS step_name,
           unnest(CAST(json_extract(step, '$.requests') AS JSON[])) AS req,
           generate_subscripts(CAST(json_extract(step, '$.requests') AS JSON[]), 1) - 1 AS request_index
    FROM s
    WHERE json_array_length(json_extract(step, '$.requests')) > 0
)
SELECT
    trace_id,
    step_name,
    request_index,
    json_extract_string(req, '$.request_id') AS request_id,
    json_extract_string(req, '$.tenant') AS tenant,
    json_extract_string(req, '$.phase') AS request_phase,
    CAST(json_extract(req, '$.tokens') AS BIGINT) AS tokens,
    CAST(json_extract(req, '$.context_tokens') AS BIGINT) AS context_tokens,
    TRY_CAST(json_extract(req, '$.output_tokens') AS BIGINT) AS output_tokens
FROM r
WHERE trace_id NOT IN (SELECT DISTINCT trace_id FROM stg_request_lists)
UNION ALL
SELECT trace_id, step_name, request_index, request_id, tenant, request_phase, tokens, context_tokens, output_tokens
FROM stg_request_lists
WHERE request_index IS NOT NULL
