-- table: int_host_threads
-- grain: one row per host thread of int_host_segments
-- reads: int_host_segments, int_kernel_links
-- materialize: temp
-- description: Each host thread with whether it launches kernels and whether host_partition's 'trace' row sums it (the trace's kernel-launching threads; a trace whose threads launch nothing: every thread); read by int_host_windows and host_partition (METHOD.md section 3). A run-local table of its own rather than a step of host_partition's statement: DuckDB held int_window_parts' two ordered lookups and host_partition's sums in one statement's memory (1 M kernels: out of memory under a 200MB memory_limit, where the three statements finish) (ours, an engine choice; the rows are those of the one statement).
-- column: pk: int_host_segments.pk of the thread
-- column: trace_id: trace key
-- column: pid: host process
-- column: tid: host thread
-- column: launches_kernels: the thread launches at least one kernel (int_kernel_links.has_launch)
-- column: in_trace_row: host_partition's 'trace' row of its trace sums the thread
WITH
launching AS (
    SELECT DISTINCT hash(trace_id, pid, launch_tid) AS pk FROM int_kernel_links WHERE has_launch
),
threads AS (
    SELECT t.*, l.pk IS NOT NULL AS launches_kernels
    FROM (SELECT DISTINCT pk, trace_id, pid, tid FROM int_host_segments) t
    LEFT JOIN launching l USING (pk)
)
SELECT pk, trace_id, pid, tid, launches_kernels,
       -- the trace's kernel-launching threads; a trace whose threads launch nothing: every thread
       launches_kernels OR NOT bool_or(launches_kernels) OVER (PARTITION BY trace_id) AS in_trace_row
FROM threads
