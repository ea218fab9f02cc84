-- table: trace_meta_steps
-- grain: one row per step listed in a trace's taxbreak metadata
-- reads: stg_meta_raw
-- description: The metadata's steps: the annotation name of each step, its phase and the tokens it produced per request.
-- column: trace_id: trace key
-- column: step_index: 0-based position in the metadata's steps list
-- column: step_name: annotation name of the step (matched to user annotation / NVTX range names)
-- column: phase: 'prefill', 'decode', 'mixed' or 'other'
-- column: tokens: output tokens this step produced per request (tokens)
WITH s AS (
    SELECT trace_id, unnest(CAST(json_extract(meta_json, '$.steps') AS JSON[])) AS step,
           generate_subscripts(CAST(json_extract(meta_json, '$.steps') AS JSON[]), 1) - 1 AS step_index
    FROM stg_meta_raw
    WHERE meta_json IS NOT NULL AND json_array_length(json_extract(meta_json, '$.steps')) > 0
)
SELECT
    trace_id,
    step_index,
    json_extract_string(step, '$.name') AS step_name,
    json_extract_string(step, '$.phase') AS phase,
    TRY_CAST(json_extract(step, '$.tokens') AS BIGINT) AS tokens
FROM s
