-- title: Where the host thread time goes
-- description: The exact host-time partition per trace as shares of the traced wall time.
SELECT m.file_name, p.wall_ns, round(p.launch_host_ns / p.wall_ns, 3) AS launch_share,
       round(p.library_ns / p.wall_ns, 3) AS library_share, round(p.framework_ns / p.wall_ns, 3) AS framework_share,
       round(p.sync_ns / p.wall_ns, 3) AS sync_share, round(p.other_runtime_ns / p.wall_ns, 3) AS other_runtime_share,
       round(p.host_untraced_ns / p.wall_ns, 3) AS untraced_share
FROM host_partition p JOIN trace_meta m USING (trace_id)
WHERE p.scope_kind = 'trace' AND p.wall_ns > 0
ORDER BY m.file_name;
