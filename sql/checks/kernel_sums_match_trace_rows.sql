-- check: kernel_sums_match_trace_rows
-- guards: kernel_taxbreak
-- reads: kernel_taxbreak, taxbreak_by_scope
-- severity: error
-- description: Per trace, the per-kernel ΔFT, ΔCT, ΔKT and kernel count sum to the trace row of taxbreak_by_scope.
WITH k AS (
    SELECT trace_id, count(*) AS kernels, coalesce(sum(delta_ft_ns), 0) AS ft, coalesce(sum(delta_ct_ns), 0) AS ct,
           coalesce(sum(delta_kt_ns), 0) AS kt
    FROM kernel_taxbreak
    GROUP BY ALL
)
SELECT k.trace_id, k.kernels, t.kernels AS scope_kernels, k.ft, t.delta_ft_ns, k.ct, t.delta_ct_ns, k.kt, t.delta_kt_ns
FROM k
JOIN taxbreak_by_scope t ON t.trace_id = k.trace_id AND t.scope_kind = 'trace'
WHERE k.kernels <> t.kernels OR k.ft <> coalesce(t.delta_ft_ns, 0) OR k.ct <> coalesce(t.delta_ct_ns, 0)
   OR k.kt <> coalesce(t.delta_kt_ns, 0)
