-- table: serving_step_requests
-- grain: one row per request per serving step whose composition lists its requests (metadata steps[].requests[])
-- reads: serving_steps, int_meta_step_requests
-- description: Who ran in each serving step, request by request: the inputs of the per-request shares (request_step_shares). Steps composed from vLLM or SGLang annotations have no rows here: those annotations give per-step sums, not requests.
-- column: trace_id: trace key
-- column: step_id: serving step (serving_steps.step_id)
-- column: request_id: request id as the engine named it
-- column: tenant: tenant of the request; '(none)' when not given
-- column: request_phase: 'prefill' or 'decode'
-- column: tokens: tokens processed this step, p_i (tokens)
-- column: context_tokens: tokens already cached for the request before the step, c_i (tokens)
-- column: output_tokens: tokens the step emitted for the request; NULL when not given (tokens)
SELECT
    s.trace_id,
    s.step_id,
    r.request_id,
    coalesce(r.tenant, '(none)') AS tenant,
    r.request_phase,
    r.tokens,
    r.context_tokens,
    r.output_tokens
FROM serving_steps s
JOIN int_meta_step_requests r ON r.trace_id = s.trace_id AND r.step_name = s.step_name
WHERE s.composition_source = 'sidecar'
