-- check: per_kernel_costs_consistent
-- guards: kernel_taxbreak
-- reads: kernel_taxbreak, taxbreak_by_scope
-- severity: error
-- description: Per kernel: uncharged kernels carry no host cost; a charged kernel's ΔKT is the trace's T_sys; ΔFT, ΔCT, ΔKT are never negative.
SELECT trace_id, kernel_seq, is_charged, delta_ft_ns, delta_ct_ns, delta_kt_ns, t_sys_ns
FROM kernel_taxbreak
WHERE (NOT is_charged AND (delta_ft_ns <> 0 OR delta_ct_ns <> 0 OR delta_kt_ns <> 0))
   OR (is_charged AND delta_kt_ns IS DISTINCT FROM t_sys_ns)
   OR delta_ft_ns < 0 OR delta_ct_ns < 0 OR delta_kt_ns < 0
