-- table: int_steps
-- grain: one row per step range (a host user annotation or NVTX range whose name matches a step pattern)
-- reads: stg_events, step_patterns, trace_meta_steps, run_config
-- description: Iteration and phase ranges: ProfilerStep#N, prefill / decode annotations and configured patterns (taxbreak.engine.analysis.STEP_PATTERNS), with phase and tokens from the pattern or from the metadata's steps (matched by name). Nested steps get increasing nesting levels; a kernel belongs to the innermost step that contains its launch call (its start when it has none).
-- column: trace_id: trace key
-- column: step_id: 1-based position of the step in the trace by start time
-- column: step_name: annotation name
-- column: step_rule: the step pattern rule that matched
-- column: phase: 'prefill', 'decode', ... from the pattern, else from the metadata step of the same name; NULL when unknown
-- column: tokens: output tokens of this step per request from the metadata (tokens); NULL when unknown
-- column: pid: host process of the annotation
-- column: tid: host thread of the annotation
-- column: step_ts_ns: step start (ns)
-- column: step_end_ns: step end (ns)
-- column: step_dur_ns: step duration (ns)
-- column: step_level: nesting level among the trace's step ranges of the same process (1 = outermost)
-- column: is_leaf_step: no other step range of the process lies inside this one
-- column: is_outlier_step: the step is longer than run_config.outlier_step_factor (5) x the median duration of the other steps of its trace, process and level (ours; needs at least one other step): a first iteration spent in autotuning or warm-up, which would dominate trace-level figures
-- column: in_outlier_step: the step is an outlier step or lies inside one; kernel_taxbreak's kernels of such steps are left out of the scope 'trace_excl_outliers'
WITH
annotations AS (
    SELECT trace_id, event_id, name, pid, tid, ts_ns, end_ns, dur_ns
    FROM stg_events WHERE kind IN ('user_annotation', 'nvtx_range') AND dur_ns > 0
),
-- each distinct name against the patterns, not each range: a pattern read from a table is compiled for every pair
-- it is matched on (14,000 NVTX ranges x 10 patterns took 7 s of CPU on the public traces)
-- A pattern's literal head (`^serve_step#\d+$` -> serve_step#; '' when it has none, or a '|' anywhere, or the head
-- is followed by a quantifier) is tested first: a name that does not start with it cannot match, and the regex is
-- compiled only for the pairs left (ours, issue 26: 10^4 distinct step names x 13 patterns took 2.4 s).
heads AS (
    SELECT *, CASE WHEN contains(pattern, '|') THEN ''
                   ELSE lower(regexp_extract(pattern, '^\^([A-Za-z_#]+)([^?*{A-Za-z_#]|$)', 1)) END AS head
    FROM step_patterns
),
name_rule AS (
    SELECT n.name, p.rule, p.phase
    FROM (SELECT DISTINCT name FROM annotations) n JOIN heads p
      ON (p.head = '' OR starts_with(lower(n.name), p.head)) AND regexp_matches(n.name, p.pattern, 'i')
    QUALIFY row_number() OVER (PARTITION BY n.name ORDER BY p.priority) = 1
),
matched AS (
    SELECT a.trace_id, a.event_id, a.name, a.pid, a.tid, a.ts_ns, a.end_ns, a.dur_ns, r.rule, r.phase
    FROM annotations a JOIN name_rule r USING (name)
),
-- (a, b): b contains a (b.ts <= a.ts and a.end <= b.end) on the same trace and process, a itself included. Each
-- (trace, process) is moved to a time range of its own (grp * width), so the pairs come from a join on two
-- inequalities alone. (Over this CTE DuckDB plans it as a piecewise merge join, which still compares a range with
-- every earlier one: quadratic at worst, as the hash join on (trace, pid) it replaced; over a table it picks an
-- IEJoin, O(n log n). Ranges without a pid never matched the join on pid and stay out; ours, issue 26.)
spans AS (
    SELECT m.event_id, m.ts_ns, m.end_ns,
           (dense_rank() OVER (ORDER BY m.trace_id, m.pid) - 1) * w.width + (m.ts_ns - w.t0) AS g_ts,
           (dense_rank() OVER (ORDER BY m.trace_id, m.pid) - 1) * w.width + (m.end_ns - w.t0) AS g_end
    FROM matched m, (SELECT min(ts_ns) AS t0, max(end_ns) - min(ts_ns) + 1 AS width FROM matched) w
    WHERE m.pid IS NOT NULL
),
contains AS (
    SELECT a.event_id, b.event_id AS b_event_id, b.ts_ns = a.ts_ns AND b.end_ns = a.end_ns AS same_span
    FROM spans a JOIN spans b ON b.g_ts <= a.g_ts AND a.g_end <= b.g_end
),
levels AS (
    SELECT event_id, count(*) FILTER (WHERE NOT same_span OR b_event_id <= event_id) AS step_level
    FROM contains GROUP BY event_id
),
meta AS (
    SELECT trace_id, step_name, any_value(phase) AS phase, any_value(tokens) AS tokens
    FROM trace_meta_steps GROUP BY trace_id, step_name
),
-- the median of the other steps of the same trace, process and level, read off the group's sorted durations with
-- the step's own place r left out (the k-th of the others is the (k + [k >= r])-th of all): with m = n - 1 others
-- and a = (n - 2) // 2, the median needs only the group's a-th, (a+1)-th and (a+2)-th durations (0-based), so
-- memory and time grow with the steps, not with their pairs (a self join held every pair: 10^8 at 10,000 steps;
-- a list of the group's durations joined to each step copied it per step: 10^10 values at 10^5 steps, issue 26)
ranked AS (
    SELECT m.event_id, m.trace_id, m.pid, l.step_level, m.dur_ns,
           row_number() OVER g - 1 AS r,
           count(*) OVER (PARTITION BY m.trace_id, m.pid, l.step_level) AS n
    FROM matched m JOIN levels l USING (event_id)
    WINDOW g AS (PARTITION BY m.trace_id, m.pid, l.step_level ORDER BY m.dur_ns, m.event_id)
),
middle AS (
    SELECT trace_id, pid, step_level,
           max(dur_ns) FILTER (WHERE r = (n - 2) // 2) AS d0,
           max(dur_ns) FILTER (WHERE r = (n - 2) // 2 + 1) AS d1,
           max(dur_ns) FILTER (WHERE r = (n - 2) // 2 + 2) AS d2
    FROM ranked GROUP BY trace_id, pid, step_level
),
others AS (
    SELECT
        a.event_id,
        CASE WHEN (a.n - 1) % 2 = 1
            THEN CAST(CASE WHEN (a.n - 2) // 2 >= a.r THEN s.d1 ELSE s.d0 END AS DOUBLE)
            ELSE CASE WHEN (a.n - 2) // 2 >= a.r THEN s.d1 ELSE s.d0 END
                 + (CASE WHEN (a.n - 2) // 2 + 1 >= a.r THEN s.d2 ELSE s.d1 END
                    - CASE WHEN (a.n - 2) // 2 >= a.r THEN s.d1 ELSE s.d0 END) / 2.0
        END AS others_median_ns
    FROM ranked a JOIN middle s USING (trace_id, pid, step_level)
    WHERE a.n > 1 AND a.pid IS NOT NULL  -- as the join on pid did: no others without a pid
),
outlier AS (
    SELECT o.event_id, m.dur_ns > c.outlier_step_factor * o.others_median_ns AS is_outlier
    FROM others o JOIN matched m USING (event_id) CROSS JOIN run_config c
),
nesting AS (
    -- in_outlier: a range containing it (itself included) is an outlier; has_inner: another range lies inside it
    SELECT c.event_id, bool_or(coalesce(o.is_outlier, false)) AS in_outlier,
           c.event_id IN (SELECT b_event_id FROM contains WHERE b_event_id <> event_id) AS has_inner
    FROM contains c LEFT JOIN outlier o ON o.event_id = c.b_event_id
    GROUP BY c.event_id
)
SELECT
    m.trace_id,
    row_number() OVER (PARTITION BY m.trace_id ORDER BY m.ts_ns, m.event_id) AS step_id,
    m.name AS step_name,
    m.rule AS step_rule,
    coalesce(m.phase, meta.phase) AS phase,
    meta.tokens,
    m.pid,
    m.tid,
    m.ts_ns AS step_ts_ns,
    m.end_ns AS step_end_ns,
    m.dur_ns AS step_dur_ns,
    l.step_level,
    NOT n.has_inner AS is_leaf_step,
    coalesce(o.is_outlier, false) AS is_outlier_step,
    n.in_outlier AS in_outlier_step
FROM matched m
JOIN levels l USING (event_id)
JOIN nesting n USING (event_id)
LEFT JOIN outlier o USING (event_id)
LEFT JOIN meta ON meta.trace_id = m.trace_id AND meta.step_name = m.name
