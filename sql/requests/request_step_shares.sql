-- table: request_step_shares
-- grain: one row per request per fitted serving step that lists its requests
-- reads: request_step_fit, serving_step_requests, serving_steps, request_model_fit
-- computed_by: taxbreak.features.requests.refit
-- description: Each request's share of a serving step (LLMVisor, docs/method.md section 8): its own phase's a1 p_i + a2 c_i + a3 p_i^2 + (beta + a4 |B_phase|) / |B_phase| with the coefficients of that phase's segment in the step (request_step_fit) and |B_phase| the step's requests of that phase; in a mixed step scaled by predicted / (prefill model + decode model), so the shared constant delta is spread in proportion to the shares (ours). The shares of a step add up to its prediction exactly. The observed latency, the device time and the host orchestration (T_Orchestrate) of the step are split by the same fractions (the orchestration split is ours).
-- column: trace_id: trace key
-- column: step_id: serving step
-- column: request_id: request id
-- column: tenant: tenant ('(none)' when not given)
-- column: request_phase: 'prefill' or 'decode'
-- column: tokens: p_i (tokens)
-- column: context_tokens: c_i (tokens)
-- column: output_tokens: tokens the step emitted for the request; NULL when not given (tokens)
-- column: model_share_ns: the model's share of the step's predicted latency (ns)
-- column: share_fraction: model_share_ns / the step's prediction; the request's fraction of the step
-- column: latency_share_ns: share_fraction times the observed step latency (ns)
-- column: device_share_ns: share_fraction times the step's device-active time (ns)
-- column: orchestration_share_ns: share_fraction times the step's T_Orchestrate (ours) (ns)
WITH j AS (
    SELECT r.trace_id, r.step_id, r.request_id, r.tenant, r.request_phase, r.tokens, r.context_tokens,
           r.output_tokens, f.predicted_ns, s.latency_ns, s.device_active_ns, s.t_orchestrate_ns,
           CASE r.request_phase WHEN 'prefill' THEN s.prefill_requests ELSE s.decode_requests END AS part_requests,
           CASE r.request_phase WHEN 'prefill' THEN f.prefill_segment ELSE f.decode_segment END AS segment,
           f.split_scale AS scale,
           m.lo_beta, m.lo_a1, m.lo_a2, m.lo_a3, m.lo_a4, m.hi_beta, m.hi_a1, m.hi_a2, m.hi_a3, m.hi_a4
    FROM serving_step_requests r
    JOIN request_step_fit f USING (trace_id, step_id)
    JOIN serving_steps s USING (trace_id, step_id)
    JOIN request_model_fit m ON m.model_name = s.model_name AND m.gpu_name = s.gpu_name AND m.phase = r.request_phase
),
sh AS (
    SELECT *,
           scale * CASE segment
               WHEN 'lo' THEN lo_a1 * tokens + lo_a2 * context_tokens + lo_a3 * tokens * tokens
                              + (lo_beta + lo_a4 * part_requests) / part_requests
               ELSE hi_a1 * tokens + hi_a2 * context_tokens + hi_a3 * tokens * tokens
                    + (hi_beta + hi_a4 * part_requests) / part_requests END AS share
    FROM j
)
SELECT
    trace_id, step_id, request_id, tenant, request_phase, tokens, context_tokens, output_tokens,
    CAST(round(share) AS BIGINT) AS model_share_ns,
    share / nullif(predicted_ns, 0) AS share_fraction,
    CAST(round(share / nullif(predicted_ns, 0) * latency_ns) AS BIGINT) AS latency_share_ns,
    CAST(round(share / nullif(predicted_ns, 0) * device_active_ns) AS BIGINT) AS device_share_ns,
    CAST(round(share / nullif(predicted_ns, 0) * t_orchestrate_ns) AS BIGINT) AS orchestration_share_ns
FROM sh
