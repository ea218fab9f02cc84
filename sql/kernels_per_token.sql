-- table: kernels_per_token
-- grain: one row per analysed trace
-- reads: kernel_taxbreak, int_steps, trace_meta, skip_by_trace
-- description: Kernels per output token (METHOD.md section 5). Paper-compatible KPT = kernels of the generate() call / output tokens m, not divided by batch size; the generate() call is the kernels inside step ranges when the trace has steps (warm-up leftovers before the first step excluded), else every kernel. Decode-only KPT = kernels in decode steps / decode steps. Per-token columns are NULL with a reason when the token count is unknown.
-- column: trace_id: trace key
-- column: kernel_scope: 'kernels_in_steps' or 'all_kernels' (no step annotations)
-- column: kernels: kernels of the generate() call (kernels)
-- column: kernels_outside_steps: kernels left out because they lie outside every step (kernels)
-- column: unique_kernels: distinct kernel names among them (kernels)
-- column: kernel_diversity: unique_kernels / kernels
-- column: output_tokens: output tokens m per request (tokens)
-- column: tokens_source: 'metadata' (output_tokens of the taxbreak metadata), 'step_tokens' (sum of step tokens) or NULL
-- column: batch_size: batch size from the metadata (requests)
-- column: kpt: kernels / output_tokens, paper-compatible (kernels per token)
-- column: decode_steps: steps whose phase is decode (steps)
-- column: decode_kernels: kernels in decode steps (kernels)
-- column: kpt_decode: decode_kernels / decode_steps (kernels per token)
-- column: prefill_kernels: kernels in prefill steps (kernels)
-- column: kpt_null_reason: why kpt is NULL
-- column: kpt_decode_null_reason: why kpt_decode is NULL
WITH
k AS (
    SELECT
        trace_id,
        count(*) AS all_kernels,
        count(*) FILTER (WHERE step_id IS NOT NULL) AS in_steps,
        count(DISTINCT kernel_name) AS unique_all,
        count(DISTINCT kernel_name) FILTER (WHERE step_id IS NOT NULL) AS unique_in_steps,
        count(*) FILTER (WHERE phase = 'decode') AS decode_kernels,
        count(*) FILTER (WHERE phase = 'prefill') AS prefill_kernels
    FROM kernel_taxbreak GROUP BY trace_id
),
s AS (
    SELECT
        trace_id,
        count(*) AS steps,
        count(*) FILTER (WHERE phase = 'decode') AS decode_steps,
        sum(tokens) AS step_tokens
    FROM int_steps GROUP BY trace_id
),
x AS (
    SELECT
        t.trace_id,
        coalesce(s.steps, 0) > 0 AS has_steps,
        coalesce(k.all_kernels, 0) AS all_kernels,
        coalesce(k.in_steps, 0) AS in_steps,
        coalesce(k.unique_all, 0) AS unique_all,
        coalesce(k.unique_in_steps, 0) AS unique_in_steps,
        coalesce(k.decode_kernels, 0) AS decode_kernels,
        coalesce(k.prefill_kernels, 0) AS prefill_kernels,
        coalesce(s.decode_steps, 0) AS decode_steps,
        coalesce(t.output_tokens, s.step_tokens) AS output_tokens,
        CASE WHEN t.output_tokens IS NOT NULL THEN 'metadata' WHEN s.step_tokens IS NOT NULL THEN 'step_tokens' END
            AS tokens_source,
        t.batch_size,
        t.meta_note,
        sk.no_kernels_reason
    FROM trace_meta t LEFT JOIN k USING (trace_id) LEFT JOIN s USING (trace_id) LEFT JOIN skip_by_trace sk USING (trace_id)
)
SELECT
    trace_id,
    CASE WHEN has_steps THEN 'kernels_in_steps' ELSE 'all_kernels' END AS kernel_scope,
    CASE WHEN has_steps THEN in_steps ELSE all_kernels END AS kernels,
    CASE WHEN has_steps THEN all_kernels - in_steps ELSE 0 END AS kernels_outside_steps,
    CASE WHEN has_steps THEN unique_in_steps ELSE unique_all END AS unique_kernels,
    CASE WHEN has_steps THEN unique_in_steps / nullif(in_steps, 0) ELSE unique_all / nullif(all_kernels, 0) END
        AS kernel_diversity,
    output_tokens,
    tokens_source,
    batch_size,
    -- a trace without GPU kernels (a host-only capture) has no kernels-per-token figure, not 0
    CASE WHEN has_steps THEN in_steps ELSE all_kernels END / nullif(output_tokens, 0) / nullif(sign(all_kernels), 0)
        AS kpt,
    decode_steps,
    decode_kernels,
    decode_kernels / nullif(decode_steps, 0) / nullif(sign(all_kernels), 0) AS kpt_decode,
    prefill_kernels,
    CASE
        WHEN all_kernels = 0 THEN coalesce(no_kernels_reason, 'no GPU kernels')
        WHEN output_tokens IS NULL THEN 'no output token count: ' || coalesce(meta_note, 'metadata has no output_tokens or step tokens')
        WHEN output_tokens = 0 THEN 'output_tokens is 0'
    END AS kpt_null_reason,
    CASE WHEN all_kernels = 0 THEN coalesce(no_kernels_reason, 'no GPU kernels')
         WHEN decode_steps = 0 THEN 'no decode step recognised (step patterns or metadata steps)' END
        AS kpt_decode_null_reason
FROM x
