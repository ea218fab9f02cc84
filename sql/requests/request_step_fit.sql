-- table: request_step_fit
-- grain: one row per fit-ready serving step whose (model, GPU, phase) has a fit
-- reads: serving_steps, request_model_fit
-- description: Fitted against observed latency per serving step: the segment the step falls in, its coefficients, the model's and the token-count baseline's predictions. The one place the segment is chosen; request_step_shares reads the coefficients from here.
-- column: trace_id: trace key
-- column: step_id: serving step (serving_steps.step_id)
-- column: phase: step phase
-- column: segment: 'lo' (sum p <= breakpoint) or 'hi'
-- column: batch_requests: requests in the step, |B| (requests)
-- column: tokens_sum: sum p (tokens)
-- column: latency_ns: observed step latency (ns)
-- column: beta: the segment's beta (ns)
-- column: a1: the segment's a1 (ns per token)
-- column: a2: the segment's a2 (ns per token)
-- column: a3: the segment's a3 (ns per token squared)
-- column: a4: the segment's a4 (ns per request)
-- column: predicted_ns: the model's step latency (ns)
-- column: baseline_predicted_ns: the token-count baseline's step latency (ns)
-- column: rel_err: |predicted - observed| / observed
-- column: baseline_rel_err: the baseline's |predicted - observed| / observed
WITH j AS (
    SELECT s.trace_id, s.step_id, s.phase, s.batch_requests, s.tokens_sum, s.tokens_sq_sum, s.context_sum,
           s.latency_ns, f.baseline_alpha, f.baseline_gamma,
           CASE WHEN f.breakpoint_tokens IS NULL OR s.tokens_sum <= f.breakpoint_tokens THEN 'lo' ELSE 'hi' END AS segment,
           f.lo_beta, f.lo_a1, f.lo_a2, f.lo_a3, f.lo_a4, f.hi_beta, f.hi_a1, f.hi_a2, f.hi_a3, f.hi_a4
    FROM serving_steps s
    JOIN request_model_fit f USING (model_name, gpu_name, phase)
    WHERE s.fit_ready
),
c AS (
    SELECT *,
           CASE segment WHEN 'lo' THEN lo_beta ELSE hi_beta END AS beta,
           CASE segment WHEN 'lo' THEN lo_a1 ELSE hi_a1 END AS a1,
           CASE segment WHEN 'lo' THEN lo_a2 ELSE hi_a2 END AS a2,
           CASE segment WHEN 'lo' THEN lo_a3 ELSE hi_a3 END AS a3,
           CASE segment WHEN 'lo' THEN lo_a4 ELSE hi_a4 END AS a4
    FROM j
)
SELECT
    trace_id, step_id, phase, segment, batch_requests, tokens_sum, latency_ns, beta, a1, a2, a3, a4,
    beta + a1 * tokens_sum + a2 * context_sum + a3 * tokens_sq_sum + a4 * batch_requests AS predicted_ns,
    baseline_alpha + baseline_gamma * tokens_sum AS baseline_predicted_ns,
    abs(beta + a1 * tokens_sum + a2 * context_sum + a3 * tokens_sq_sum + a4 * batch_requests - latency_ns)
        / latency_ns AS rel_err,
    abs(baseline_alpha + baseline_gamma * tokens_sum - latency_ns) / latency_ns AS baseline_rel_err
FROM c
