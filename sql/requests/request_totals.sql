-- table: request_totals
-- grain: one row per request of a trace listed in its serving steps (over its life: every step it ran in)
-- reads: serving_step_requests, request_step_shares, serving_steps
-- computed_by: taxbreak.features.requests.refit
-- description: A request's life and its attributed cost: its tokens, steps and end-to-end span from every step it ran in (serving_step_requests), and the sums of its per-step shares (request_step_shares) over the steps that have a fit. A step whose phase has no fit (e.g. the one prefill step of a short capture: a phase needs two fit-ready steps) still counts its tokens here; it adds no share, and fitted_steps < steps says so.
-- column: trace_id: trace key
-- column: request_id: request id
-- column: tenant: tenant ('(none)' when not given)
-- column: steps: steps the request ran in (steps)
-- column: fitted_steps: of those, steps with a fit, whose shares the *_share_ns columns sum (steps)
-- column: first_step_id: its first step
-- column: last_step_id: its last step
-- column: prefill_tokens: prompt tokens it processed over all its prefill steps or chunks (tokens)
-- column: decode_steps: steps it decoded in (steps)
-- column: output_tokens: tokens emitted for it; NULL when not given (tokens)
-- column: max_context_tokens: the largest context it attended (tokens)
-- column: model_share_ns: sum of its model shares over its fitted steps; NULL when none has a fit (ns)
-- column: latency_share_ns: sum of its shares of observed step latency over its fitted steps (ns)
-- column: device_share_ns: sum of its shares of device-active time over its fitted steps (ns)
-- column: orchestration_share_ns: sum of its shares of T_Orchestrate (ours) over its fitted steps (ns)
-- column: e2e_ns: from its first step's start to its last step's end (ns)
WITH life AS (
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
        max(s.step_end_ns) - min(s.step_ts_ns) AS e2e_ns
    FROM serving_step_requests r
    JOIN serving_steps s USING (trace_id, step_id)
    GROUP BY r.trace_id, r.request_id
),
shares AS (
    SELECT
        trace_id,
        request_id,
        count(*) AS fitted_steps,
        CAST(sum(model_share_ns) AS BIGINT) AS model_share_ns,
        CAST(sum(latency_share_ns) AS BIGINT) AS latency_share_ns,
        CAST(sum(device_share_ns) AS BIGINT) AS device_share_ns,
        CAST(sum(orchestration_share_ns) AS BIGINT) AS orchestration_share_ns
    FROM request_step_shares
    GROUP BY trace_id, request_id
)
SELECT
    l.trace_id,
    l.request_id,
    l.tenant,
    l.steps,
    coalesce(sh.fitted_steps, 0) AS fitted_steps,
    l.first_step_id,
    l.last_step_id,
    l.prefill_tokens,
    l.decode_steps,
    l.output_tokens,
    l.max_context_tokens,
    sh.model_share_ns,
    sh.latency_share_ns,
    sh.device_share_ns,
    sh.orchestration_share_ns,
    l.e2e_ns
FROM life l
LEFT JOIN shares sh USING (trace_id, request_id)
