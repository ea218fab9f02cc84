-- title: HDBI and TKLQT against batch size
-- description: A batch-size sweep per model: where the workload turns from host-bound to device-bound.
SELECT m.model, m.batch_size, round(t.hdbi, 3) AS hdbi, s.tklqt_ns, s.il_ns, t.t_orchestrate_ns,
       t.t_device_active_ns
FROM trace_meta m
JOIN taxbreak_by_scope t ON t.trace_id = m.trace_id AND t.scope_kind = 'trace'
JOIN skip_by_trace s ON s.trace_id = m.trace_id
WHERE m.batch_size IS NOT NULL
ORDER BY m.model, m.batch_size;
