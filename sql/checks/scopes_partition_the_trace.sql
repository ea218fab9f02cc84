-- check: scopes_partition_the_trace
-- guards: taxbreak_by_scope
-- reads: taxbreak_by_scope
-- severity: error
-- description: Steps, phases, ops and kernel names each partition the trace: their kernels, ΔFT, ΔCT, ΔKT and device time sum to the trace row's.
WITH parts AS (
    SELECT trace_id, scope_kind, sum(kernels) AS kernels, coalesce(sum(delta_ft_ns), 0) AS ft,
           coalesce(sum(delta_ct_ns), 0) AS ct, coalesce(sum(delta_kt_ns), 0) AS kt,
           coalesce(sum(t_device_active_ns), 0) AS dev
    FROM taxbreak_by_scope
    WHERE scope_kind IN ('step', 'phase', 'op', 'kernel')
    GROUP BY ALL
)
SELECT p.trace_id, p.scope_kind, p.kernels, t.kernels AS trace_kernels, p.ft, t.delta_ft_ns, p.kt, t.delta_kt_ns
FROM parts p
JOIN taxbreak_by_scope t ON t.trace_id = p.trace_id AND t.scope_kind = 'trace'
WHERE p.kernels IS DISTINCT FROM t.kernels OR p.ft <> coalesce(t.delta_ft_ns, 0)
   OR p.ct <> coalesce(t.delta_ct_ns, 0) OR p.kt <> coalesce(t.delta_kt_ns, 0)
   OR p.dev <> coalesce(t.t_device_active_ns, 0)
