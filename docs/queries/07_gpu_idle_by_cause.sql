-- title: GPU idle time by cause
-- description: Device idle gaps grouped by cause: late launches (host-bound), synchronisation, memcpy, other.
SELECT m.file_name, g.cause, count(*) AS gaps, sum(g.gap_ns) AS idle_ns, max(g.gap_ns) AS longest_gap_ns
FROM device_idle_gaps g JOIN trace_meta m USING (trace_id)
GROUP BY m.file_name, g.cause
ORDER BY m.file_name, idle_ns DESC;
