-- table: request_totals
-- grain: one row per request of a trace (over its life: every fitted step it ran in)
-- reads: request_step_shares, serving_steps
-- description: A request's attributed cost over its life: the sums of its per-step shares (request_step_shares), its tokens, and its end-to-end span from its first step's start to its last step's end.
-- column: trace_id: trace key
-- column: request_id: request id
-- column: tenant: tenant ('(none)' when not given)
-- column: steps: steps the request ran in (steps)
-- column: first_step_id: its first step
-- column: last_step_id: its last step
-- column: prefill_tokens: prompt tokens it processed (tokens)
-- column: decode_steps: steps it decoded in (steps)
-- column: output_tokens: tokens emitted for it; NULL when not given (tokens)
-- column: max_context_tokens: the largest context it attended (tokens)
-- column: model_share_ns: sum of its model shares (ns)
-- column: latency_share_ns: sum of its shares of observed step latency (ns)
-- column: device_share_ns: sum of its shares of device-active time (ns)
-- column: orchestration_share_ns: sum of its shares of T_Orchestrate (ours) (ns)
-- column: e2e_ns: from its first step's start to its last step's end (ns)
SELECT
    r.trace_id,
    r.request_id,
    any_value(r.tenant) AS tenant,
    count(*) AS steps,
    min(r.step_id) AS first_step_id,
    max(r.step_id) AS last_step_id,
    CAST(coalesce(sum(r.tokens) FILTER (WHERE r.request_phase = 'prefill'), 0) AS BIGINT) AS prefill_tokens,
    count(*) FILTER (WHERE r.request_phase = 'decode') AS decode_steps,
    CAST(sum(r.output_tokens) AS BIGINT) AS output_tokens,
    max(r.context_tokens + r.tokens) AS max_context_tokens,
    CAST(sum(r.model_share_ns) AS BIGINT) AS model_share_ns,
    CAST(sum(r.latency_share_ns) AS BIGINT) AS latency_share_ns,
    CAST(sum(r.device_share_ns) AS BIGINT) AS device_share_ns,
    CAST(sum(r.orchestration_share_ns) AS BIGINT) AS orchestration_share_ns,
    max(s.step_end_ns) - min(s.step_ts_ns) AS e2e_ns
FROM request_step_shares r
JOIN serving_steps s USING (trace_id, step_id)
GROUP BY r.trace_id, r.request_id
