-- table: int_window_parts
-- grain: one row per (window of int_host_windows, host segment category) with time in the window
-- reads: int_host_segments, int_host_windows
-- materialize: temp
-- description: Each window's traced host time by category (METHOD.md section 3): the thread's segments clipped to the window, summed by host_partition into its 'step' and 'trace_excl_outliers' rows; what the clipped parts leave of the window (before the thread's first event, after its last, between events) is untraced there. A segment overlapping the window either starts inside it (found by ASOF per step nesting level: steps of one level do not overlap) or is the one running at the window's start (found by ASOF from the window), so no segment x window cross product. A run-local table of its own rather than a step of host_partition's statement: DuckDB held int_window_parts' two ordered lookups and host_partition's sums in one statement's memory (1 M kernels: out of memory under a 200MB memory_limit, where the three statements finish) (ours, an engine choice; the rows are those of the one statement).
-- column: trace_id: trace key
-- column: step_id: int_host_windows.step_id
-- column: wkind: int_host_windows.wkind
-- column: pk: int_host_segments.pk of the thread
-- column: category: int_host_segments.category
-- column: part_ns: the category's time in the window (ns)
WITH
windows AS (SELECT * FROM int_host_windows),
traced AS (
    SELECT pk, t, seg_ns, category FROM int_host_segments WHERE category <> 6 AND pk IN (SELECT pk FROM windows)
),
starting AS (
    SELECT st.trace_id, st.step_id, st.wkind, st.pk, l.category,
           least(l.t + l.seg_ns, st.step_end_ns) - l.t AS part_ns
    FROM (SELECT l.*, lv.step_level FROM traced l JOIN (SELECT DISTINCT pk, step_level FROM windows) lv USING (pk)) l
    ASOF JOIN windows st ON l.pk = st.pk AND l.step_level = st.step_level AND l.t >= st.step_ts_ns
    WHERE l.t < st.step_end_ns
),
straddling AS (
    SELECT st.trace_id, st.step_id, st.wkind, st.pk, l.category,
           least(l.t + l.seg_ns, st.step_end_ns) - st.step_ts_ns AS part_ns
    FROM windows st ASOF JOIN traced l ON st.pk = l.pk AND st.step_ts_ns > l.t
    WHERE l.t + l.seg_ns > st.step_ts_ns
)
SELECT trace_id, step_id, wkind, pk, category, sum(part_ns) AS part_ns
FROM (SELECT * FROM starting UNION ALL SELECT * FROM straddling) GROUP BY ALL
