-- check: orchestrate_is_ft_plus_ct_plus_kt
-- guards: taxbreak_by_scope
-- reads: taxbreak_by_scope
-- severity: error
-- description: T_Orchestrate = ΔFT + ΔCT + ΔKT in every scope (docs/method.md section 2).
SELECT trace_id, scope_kind, scope_key, t_orchestrate_ns, delta_ft_ns, delta_ct_ns, delta_kt_ns
FROM taxbreak_by_scope
WHERE t_orchestrate_ns IS DISTINCT FROM delta_ft_ns + delta_ct_ns + delta_kt_ns
