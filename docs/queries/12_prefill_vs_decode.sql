-- title: Prefill vs decode
-- description: The TaxBreak split per phase: decode is usually the host-bound one.
SELECT m.file_name, s.scope_key AS phase, s.kernels, s.delta_ft_ns, s.delta_ct_ns, s.delta_kt_ns,
       s.t_device_active_ns, round(s.hdbi, 3) AS hdbi
FROM taxbreak_by_scope s JOIN trace_meta m USING (trace_id)
WHERE s.scope_kind = 'phase'
ORDER BY m.file_name, s.scope_key;
