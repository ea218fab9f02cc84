-- table: int_host_windows
-- grain: one row per (step, thread launching its kernels) and per (outermost outlier step, thread of its trace's 'trace' row)
-- reads: int_steps, kernel_taxbreak, int_kernel_links, int_host_threads
-- materialize: temp
-- description: The windows host_partition clips the host segments to (METHOD.md section 3): a step's window on each of its launching threads (the threads that launch kernels kernel_taxbreak puts in the step; a step without kernels: its annotation's thread), wkind 'step'; the outermost outlier steps' windows on every thread of the trace row, to take them out of it ('trace_excl_outliers'), wkind 'excl'. A run-local table of its own rather than a step of host_partition's statement: DuckDB held int_window_parts' two ordered lookups and host_partition's sums in one statement's memory (1 M kernels: out of memory under a 200MB memory_limit, where the three statements finish) (ours, an engine choice; the rows are those of the one statement).
-- column: trace_id: trace key
-- column: step_id: int_steps.step_id
-- column: step_level: int_steps.step_level; -1 for the outlier windows, which keeps them apart from the step windows in int_window_parts' lookups
-- column: step_ts_ns: window start (ns)
-- column: step_end_ns: window end (ns)
-- column: step_dur_ns: window length (ns)
-- column: pk: int_host_segments.pk of the thread
-- column: launches_kernels: the thread launches the step's kernels ('step'; false for the annotation's thread of a step without kernels), true ('excl')
-- column: wkind: 'step' or 'excl'
WITH
step_threads AS (
    SELECT DISTINCT kt.trace_id, kt.step_id, hash(l.trace_id, l.pid, l.launch_tid) AS pk
    FROM kernel_taxbreak kt JOIN int_kernel_links l USING (trace_id, kernel_seq)
    WHERE kt.step_id IS NOT NULL AND l.has_launch
),
steps AS (
    SELECT s.trace_id, s.step_id, s.step_level, s.step_ts_ns, s.step_end_ns, s.step_dur_ns,
           coalesce(t.pk, hash(s.trace_id, s.pid, s.tid)) AS pk, t.pk IS NOT NULL AS launches_kernels
    FROM int_steps s LEFT JOIN step_threads t USING (trace_id, step_id)
),
outlier_windows AS (
    SELECT s.trace_id, s.step_id, -1 AS step_level, s.step_ts_ns, s.step_end_ns, s.step_dur_ns, t.pk,
           true AS launches_kernels
    FROM int_steps s JOIN int_host_threads t ON t.trace_id = s.trace_id AND t.in_trace_row
    WHERE s.is_outlier_step AND NOT EXISTS (
        SELECT 1 FROM int_steps o WHERE o.trace_id = s.trace_id AND o.pid = s.pid AND o.is_outlier_step
          AND o.step_id <> s.step_id AND o.step_ts_ns <= s.step_ts_ns AND s.step_end_ns <= o.step_end_ns
    )
)
SELECT *, 'step' AS wkind FROM steps
UNION ALL
SELECT *, 'excl' FROM outlier_windows
