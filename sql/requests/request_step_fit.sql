-- table: request_step_fit
-- grain: one row per fit-ready serving step whose parts all have a fit (a mixed step: both phase models)
-- reads: serving_steps, request_model_fit
-- computed_by: taxbreak.features.requests.refit
-- description: Fitted against observed latency per serving step, and the step's prefill/decode split (docs/method.md section 8): each part from its own phase's model over its own requests, in the segment its own sum p falls in; a mixed step adds the shared constant delta (request_model_fit.shared_ns of its 'mixed' row), spread over the two parts in proportion to them (ours). The one place the segments are chosen; request_step_shares reads them from here.
-- column: trace_id: trace key
-- column: step_id: serving step (serving_steps.step_id)
-- column: phase: step phase
-- column: prefill_segment: 'lo' (the prefill part's sum p <= the prefill breakpoint) or 'hi'; NULL when the step has no prefill request
-- column: decode_segment: 'lo' or 'hi' for the decode part; NULL when the step has no decode request
-- column: batch_requests: requests in the step, |B| (requests)
-- column: tokens_sum: sum p (tokens)
-- column: latency_ns: observed step latency (ns)
-- column: prefill_model_ns: the prefill model over the step's prefill requests, before delta, rounded to an int64 (ns)
-- column: decode_model_ns: the decode model over the step's decode requests, before delta, rounded (ns)
-- column: shared_ns: delta, the constant a mixed step's parts share, rounded; 0 in a pure step (ns)
-- column: prefill_part_ns: the step's prefill part: the prefill model plus its proportional part of delta, rounded (ns)
-- column: decode_part_ns: the step's decode part: the decode model plus its proportional part of delta; predicted_ns - prefill_part_ns, so the two parts add up to the prediction exactly (ns)
-- column: prefill_fraction: the prefill part over the prediction (before rounding): the prefill share of the step (1 in a prefill step, 0 in a decode step)
-- column: predicted_ns: the model's step latency: prefill_model_ns + decode_model_ns + shared_ns = prefill_part_ns + decode_part_ns (ns)
-- column: split_scale: (prefill model + decode model + delta) / (prefill model + decode model) before rounding: the factor every share of the step is multiplied by (1 in a pure step)
-- column: baseline_predicted_ns: the token-count baseline of the step's phase (mixed: fitted on the mixed steps), rounded (ns)
-- column: rel_err: |predicted - observed| / observed (the prediction before rounding)
-- column: baseline_rel_err: the baseline's |predicted - observed| / observed
WITH j AS (
    SELECT s.trace_id, s.step_id, s.phase, s.batch_requests, s.tokens_sum, s.latency_ns,
           s.prefill_requests, s.prefill_tokens_sum, s.prefill_context_sum, s.prefill_tokens_sq_sum,
           s.decode_requests, s.decode_tokens_sum, s.decode_context_sum, s.decode_tokens_sq_sum,
           CASE WHEN s.prefill_requests > 0 THEN
               CASE WHEN fp.breakpoint_tokens IS NULL OR s.prefill_tokens_sum <= fp.breakpoint_tokens THEN 'lo'
                    ELSE 'hi' END END AS prefill_segment,
           CASE WHEN s.decode_requests > 0 THEN
               CASE WHEN fd.breakpoint_tokens IS NULL OR s.decode_tokens_sum <= fd.breakpoint_tokens THEN 'lo'
                    ELSE 'hi' END END AS decode_segment,
           fp.lo_beta AS p_lo_beta, fp.lo_a1 AS p_lo_a1, fp.lo_a2 AS p_lo_a2, fp.lo_a3 AS p_lo_a3, fp.lo_a4 AS p_lo_a4,
           fp.hi_beta AS p_hi_beta, fp.hi_a1 AS p_hi_a1, fp.hi_a2 AS p_hi_a2, fp.hi_a3 AS p_hi_a3, fp.hi_a4 AS p_hi_a4,
           fd.lo_beta AS d_lo_beta, fd.lo_a1 AS d_lo_a1, fd.lo_a2 AS d_lo_a2, fd.lo_a3 AS d_lo_a3, fd.lo_a4 AS d_lo_a4,
           fd.hi_beta AS d_hi_beta, fd.hi_a1 AS d_hi_a1, fd.hi_a2 AS d_hi_a2, fd.hi_a3 AS d_hi_a3, fd.hi_a4 AS d_hi_a4,
           CASE WHEN s.phase = 'mixed' THEN coalesce(fm.shared_ns, 0) ELSE 0 END AS shared_ns,
           coalesce(fb.baseline_alpha, 0) + coalesce(fb.baseline_gamma, 0) * s.tokens_sum AS baseline_predicted_ns,
           fb.baseline_alpha IS NOT NULL AS has_baseline
    FROM serving_steps s
    LEFT JOIN request_model_fit fp ON fp.model_name = s.model_name AND fp.gpu_name = s.gpu_name AND fp.phase = 'prefill'
    LEFT JOIN request_model_fit fd ON fd.model_name = s.model_name AND fd.gpu_name = s.gpu_name AND fd.phase = 'decode'
    LEFT JOIN request_model_fit fm ON fm.model_name = s.model_name AND fm.gpu_name = s.gpu_name AND fm.phase = 'mixed'
    LEFT JOIN request_model_fit fb ON fb.model_name = s.model_name AND fb.gpu_name = s.gpu_name AND fb.phase = s.phase
    WHERE s.fit_ready
      AND (s.prefill_requests = 0 OR fp.phase IS NOT NULL)
      AND (s.decode_requests = 0 OR fd.phase IS NOT NULL)
),
parts AS (
    SELECT *,
           CASE prefill_segment
               WHEN 'lo' THEN p_lo_beta + p_lo_a1 * prefill_tokens_sum + p_lo_a2 * prefill_context_sum
                              + p_lo_a3 * prefill_tokens_sq_sum + p_lo_a4 * prefill_requests
               WHEN 'hi' THEN p_hi_beta + p_hi_a1 * prefill_tokens_sum + p_hi_a2 * prefill_context_sum
                              + p_hi_a3 * prefill_tokens_sq_sum + p_hi_a4 * prefill_requests
               ELSE 0 END AS prefill_model_ns,
           CASE decode_segment
               WHEN 'lo' THEN d_lo_beta + d_lo_a1 * decode_tokens_sum + d_lo_a2 * decode_context_sum
                              + d_lo_a3 * decode_tokens_sq_sum + d_lo_a4 * decode_requests
               WHEN 'hi' THEN d_hi_beta + d_hi_a1 * decode_tokens_sum + d_hi_a2 * decode_context_sum
                              + d_hi_a3 * decode_tokens_sq_sum + d_hi_a4 * decode_requests
               ELSE 0 END AS decode_model_ns
    FROM j
),
split AS (
    SELECT *,
           prefill_model_ns + decode_model_ns + shared_ns AS predicted_exact,
           (prefill_model_ns + decode_model_ns + shared_ns) / nullif(prefill_model_ns + decode_model_ns, 0) AS scale
    FROM parts
),
ints AS (
    -- int64 ns (the unit rule): each part rounded once, the prediction their sum, the decode part what is left of
    -- it, so prefill_model + decode_model + shared = prefill_part + decode_part = predicted exactly
    SELECT *,
           CAST(round(prefill_model_ns) AS BIGINT) AS prefill_model_int,
           CAST(round(decode_model_ns) AS BIGINT) AS decode_model_int,
           CAST(round(shared_ns) AS BIGINT) AS shared_int,
           CAST(round(prefill_model_ns * scale) AS BIGINT) AS prefill_part_int
    FROM split
)
SELECT
    trace_id, step_id, phase, prefill_segment, decode_segment, batch_requests, tokens_sum, latency_ns,
    prefill_model_int AS prefill_model_ns, decode_model_int AS decode_model_ns, shared_int AS shared_ns,
    prefill_part_int AS prefill_part_ns,
    prefill_model_int + decode_model_int + shared_int - prefill_part_int AS decode_part_ns,
    prefill_model_ns * scale / nullif(predicted_exact, 0) AS prefill_fraction,
    prefill_model_int + decode_model_int + shared_int AS predicted_ns,
    scale AS split_scale,
    CASE WHEN has_baseline THEN CAST(round(baseline_predicted_ns) AS BIGINT) END AS baseline_predicted_ns,
    abs(predicted_exact - latency_ns) / latency_ns AS rel_err,
    CASE WHEN has_baseline THEN abs(baseline_predicted_ns - latency_ns) / latency_ns END AS baseline_rel_err
FROM ints
