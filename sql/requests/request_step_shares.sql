-- table: request_step_shares
-- grain: one row per request per fitted serving step that lists its requests
-- reads: request_step_fit, serving_step_requests, serving_steps
-- description: Each request's share of a serving step (LLMVisor, docs/method.md): a1 p_i + a2 c_i + a3 p_i^2 + (beta + a4 |B|) / |B| with the step's segment coefficients; the shares of a step add up to its prediction exactly. The observed latency, the device time and the host orchestration (T_Orchestrate) of the step are split by the same fractions (the orchestration split is ours).
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
WITH sh AS (
    SELECT r.trace_id, r.step_id, r.request_id, r.tenant, r.request_phase, r.tokens, r.context_tokens,
           r.output_tokens,
           f.a1 * r.tokens + f.a2 * r.context_tokens + f.a3 * r.tokens * r.tokens
               + (f.beta + f.a4 * f.batch_requests) / f.batch_requests AS share,
           f.predicted_ns, s.latency_ns, s.device_active_ns, s.t_orchestrate_ns
    FROM serving_step_requests r
    JOIN request_step_fit f USING (trace_id, step_id)
    JOIN serving_steps s USING (trace_id, step_id)
)
SELECT
    trace_id, step_id, request_id, tenant, request_phase, tokens, context_tokens, output_tokens,
    CAST(round(share) AS BIGINT) AS model_share_ns,
    share / nullif(predicted_ns, 0) AS share_fraction,
    CAST(round(share / nullif(predicted_ns, 0) * latency_ns) AS BIGINT) AS latency_share_ns,
    CAST(round(share / nullif(predicted_ns, 0) * device_active_ns) AS BIGINT) AS device_share_ns,
    CAST(round(share / nullif(predicted_ns, 0) * t_orchestrate_ns) AS BIGINT) AS orchestration_share_ns
FROM sh
