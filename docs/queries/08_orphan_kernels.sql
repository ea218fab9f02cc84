-- title: Orphan kernels and why
-- description: Kernels the linker could not tie to a launch call or framework op; they inflate HDBI.
SELECT m.file_name, l.orphan_reason, count(*) AS kernels, sum(l.kernel_dur_ns) AS device_ns
FROM int_kernel_links l JOIN trace_meta m USING (trace_id)
WHERE l.is_orphan
GROUP BY m.file_name, l.orphan_reason
ORDER BY kernels DESC;
