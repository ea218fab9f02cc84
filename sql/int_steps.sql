-- table: int_steps
-- grain: one row per step range (a host user annotation or NVTX range whose name matches a step pattern)
-- reads: stg_events, step_patterns, trace_meta_steps
-- description: Iteration and phase ranges: ProfilerStep#N, prefill / decode annotations and configured patterns (taxbreak.analysis.STEP_PATTERNS), with phase and tokens from the pattern or from the metadata's steps (matched by name). Nested steps get increasing nesting levels; a kernel belongs to the innermost step that contains its launch call (its start when it has none).
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
WITH matched AS (
    SELECT e.trace_id, e.event_id, e.name, e.pid, e.tid, e.ts_ns, e.end_ns, e.dur_ns, p.rule, p.phase
    FROM stg_events e JOIN step_patterns p ON regexp_matches(e.name, p.pattern, 'i')
    WHERE e.kind IN ('user_annotation', 'nvtx_range') AND e.dur_ns > 0
    QUALIFY row_number() OVER (PARTITION BY e.event_id ORDER BY p.priority) = 1
),
levels AS (
    SELECT a.event_id, count(*) AS step_level
    FROM matched a JOIN matched b
      ON a.trace_id = b.trace_id AND a.pid = b.pid AND b.ts_ns <= a.ts_ns AND a.end_ns <= b.end_ns
     AND (b.ts_ns < a.ts_ns OR b.end_ns > a.end_ns OR b.event_id <= a.event_id)
    GROUP BY a.event_id
),
meta AS (
    SELECT trace_id, step_name, any_value(phase) AS phase, any_value(tokens) AS tokens
    FROM trace_meta_steps GROUP BY trace_id, step_name
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
    l.step_level
FROM matched m
JOIN levels l USING (event_id)
LEFT JOIN meta ON meta.trace_id = m.trace_id AND meta.step_name = m.name
