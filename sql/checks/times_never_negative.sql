-- check: times_never_negative
-- guards: taxbreak_by_scope
-- reads: taxbreak_by_scope
-- severity: error
-- description: T_DeviceActive, ΔFT, ΔCT, ΔKT and T_Orchestrate are never negative (a kernel ending before it starts would give HDBI 1.0 from a negative device time).
SELECT trace_id, scope_kind, scope_key, t_device_active_ns, delta_ft_ns, delta_ct_ns, delta_kt_ns, t_orchestrate_ns
FROM taxbreak_by_scope
WHERE t_device_active_ns < 0 OR delta_ft_ns < 0 OR delta_ct_ns < 0 OR delta_kt_ns < 0 OR t_orchestrate_ns < 0
