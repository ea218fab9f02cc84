-- title: Worst host-bound steps
-- description: The steps with the lowest HDBI (most time in host orchestration per unit of GPU work).
SELECT m.file_name, s.scope_key AS step_id, s.step_name, s.phase, s.kernels, s.t_orchestrate_ns,
       s.t_device_active_ns, round(s.hdbi, 3) AS hdbi
FROM taxbreak_by_scope s JOIN trace_meta m USING (trace_id)
WHERE s.scope_kind = 'step' AND s.scope_key <> 'outside_steps' AND s.hdbi IS NOT NULL
ORDER BY s.hdbi, s.t_orchestrate_ns DESC
LIMIT 20;
