-- title: Launch floor provenance
-- description: Which T_sys each trace used, and whether it was measured or a documented default.
SELECT m.file_name, f.gpu_name, f.host_name, f.t_sys_ns, f.t_sys_source, f.t_sys_rule, f.t_sys_measured_trace_id
FROM trace_launch_floor f JOIN trace_meta m USING (trace_id)
ORDER BY f.t_sys_is_default DESC, m.file_name;
