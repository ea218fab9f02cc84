-- table: request_tenants
-- grain: one row per tenant of a trace
-- reads: request_totals
-- computed_by: taxbreak.features.requests.refit
-- description: Per-tenant sums of the requests' attributed costs, and the tenant's fraction of the trace's attributed latency.
-- column: trace_id: trace key
-- column: tenant: tenant ('(none)' when not given)
-- column: requests: requests of the tenant (requests)
-- column: prefill_tokens: prompt tokens processed (tokens)
-- column: output_tokens: tokens emitted; NULL when not given (tokens)
-- column: model_share_ns: sum of the model shares (ns)
-- column: latency_share_ns: sum of the shares of observed latency (ns)
-- column: device_share_ns: sum of the shares of device-active time (ns)
-- column: orchestration_share_ns: sum of the shares of T_Orchestrate (ours) (ns)
-- column: share_of_trace: model_share_ns / the trace's total model share
SELECT
    trace_id,
    tenant,
    count(*) AS requests,
    CAST(sum(prefill_tokens) AS BIGINT) AS prefill_tokens,
    CAST(sum(output_tokens) AS BIGINT) AS output_tokens,
    CAST(sum(model_share_ns) AS BIGINT) AS model_share_ns,
    CAST(sum(latency_share_ns) AS BIGINT) AS latency_share_ns,
    CAST(sum(device_share_ns) AS BIGINT) AS device_share_ns,
    CAST(sum(orchestration_share_ns) AS BIGINT) AS orchestration_share_ns,
    sum(model_share_ns) / nullif(sum(sum(model_share_ns)) OVER (PARTITION BY trace_id), 0) AS share_of_trace
FROM request_totals
GROUP BY trace_id, tenant
