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
-- it is matched on (14,000 NVTX ranges x 10 patterns took 7 s of CPU on the public traces; 10^5 distinct step names
-- took 12 s, issue 26). So a pattern's regex runs only where a literal check cannot decide (ours, issue 26):
-- - its literal head (`^serve_step#\d+$` -> serve_step#, `^\[param\|` -> [param|; escaped punctuation counts as
--   literal) must start the name (case-folded); the head is '' (no test) when the pattern has none, when the head is
--   followed by a quantifier, or when a '|' or parenthesis is left at the top level once escapes, bracket classes
--   and up to four levels of groups are taken out (an alternation, or too deep to tell);
-- - a pattern that is its head alone (`^step\[extend`), its head and '$', or its head and '\d+$' is decided for an
--   ASCII name by comparing strings: for ASCII text the case-insensitive regex and lower() agree, and \d is [0-9].
-- - so is one whose tail after the head is a sequence of literals, '\d+' and at most one '.*' (test 'seq': vLLM's
--   `^execute_\d+_context_\d+\(.*\)_generation_0\(`), as a list of codes walked over the rest of the name: D a run
--   of digits (not before a literal that starts with a digit or another \d+, where the regex could give digits
--   back), L<text> that text next, C<text> '.*' then that text as the pattern's end (its first place in the rest,
--   before any newline: RE2's '.' stops at '\n'), A '.*' at the end, $ the end of the name; any other shape (a '.*'
--   elsewhere, '.*$', quantifiers, classes, groups) goes to the regex.
pats AS (
    SELECT *, regexp_extract(pattern, '^\^((?:[A-Za-z0-9_#]|\\[!-/:-@\[-`{-~])+)([^?*{A-Za-z0-9_#]|$)', 1) AS raw_head,
           regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(pattern,
               '\\.', '', 'g'), '\[\^?\]?[^\]]*\]', '', 'g'),
               '\([^()]*\)', '', 'g'), '\([^()]*\)', '', 'g'), '\([^()]*\)', '', 'g'), '\([^()]*\)', '', 'g')
               AS top_level
    FROM step_patterns
),
tails AS (
    SELECT *, regexp_extract_all(tail, '\\d\+|\.\*|\$|(?:[A-Za-z0-9_#]|\\[!-/:-@\[-`{-~])+') AS toks
    FROM (SELECT *, CASE WHEN raw_head = '' OR regexp_matches(top_level, '[|()]') THEN ''
                         ELSE lower(regexp_replace(raw_head, '\\(.)', '\1', 'g')) END AS head,
                    substr(pattern, strlen(raw_head) + 2) AS tail
          FROM pats)
),
seqs AS (
    SELECT *, list_filter(list_transform(range(1, len(toks) + 1), lambda i: CASE
                  WHEN toks[i] = '\d+' THEN CASE WHEN i > 1 AND toks[i - 1] = '\d+' THEN 'X' ELSE 'D' END
                  WHEN toks[i] = '.*' THEN CASE WHEN i = len(toks) THEN 'A'
                      WHEN i = len(toks) - 1 AND toks[i + 1] NOT IN ('\d+', '.*', '$')
                          THEN 'C' || lower(regexp_replace(toks[i + 1], '\\(.)', '\1', 'g'))
                      ELSE 'X' END
                  WHEN toks[i] = '$' THEN CASE WHEN i = len(toks) THEN '$' ELSE 'X' END
                  WHEN i > 1 AND toks[i - 1] = '.*' THEN ''
                  WHEN i > 1 AND toks[i - 1] = '\d+' AND regexp_matches(toks[i], '^[0-9]') THEN 'X'
                  ELSE 'L' || lower(regexp_replace(toks[i], '\\(.)', '\1', 'g')) END), lambda c: c <> '') AS codes
    FROM tails
),
heads AS (
    SELECT *, CASE WHEN head = '' THEN 'regex' WHEN tail = '' THEN 'prefix' WHEN tail = '$' THEN 'exact'
                   WHEN tail = '\d+$' THEN 'digits'
                   WHEN array_to_string(toks, '') = tail AND NOT list_contains(codes, 'X') THEN 'seq'
                   ELSE 'regex' END AS test
    FROM seqs
),
names AS (
    SELECT name, lower(name) AS lname, regexp_full_match(name, '[\x00-\x7F]*') AS ascii
    FROM (SELECT DISTINCT name FROM annotations)
),
name_rule AS (
    SELECT n.name, p.rule, p.phase
    FROM names n JOIN heads p
      ON (p.head = '' OR starts_with(n.lname, p.head))
     AND CASE WHEN NOT n.ascii OR p.test = 'regex' THEN regexp_matches(n.name, p.pattern, 'i')
              WHEN p.test = 'prefix' THEN true
              WHEN p.test = 'exact' THEN n.lname = p.head
              WHEN p.test = 'seq' THEN list_reduce(p.codes, lambda rest, c: CASE
                  WHEN rest IS NULL THEN NULL
                  WHEN c = 'D' THEN CASE WHEN ltrim(rest, '0123456789') <> rest THEN ltrim(rest, '0123456789') END
                  WHEN c[1] = 'L' THEN CASE WHEN starts_with(rest, c[2:]) THEN rest[strlen(c):] END
                  WHEN c = 'A' THEN ''
                  WHEN c[1] = 'C' THEN CASE WHEN position(c[2:] IN rest) > 0 AND (position(chr(10) IN rest) = 0
                                                  OR position(c[2:] IN rest) < position(chr(10) IN rest)) THEN '' END
                  WHEN c = '$' THEN CASE WHEN rest = '' THEN '' END END,
                  substr(n.lname, strlen(p.head) + 1)) IS NOT NULL
              ELSE regexp_full_match(substr(n.name, strlen(p.head) + 1), '[0-9]+') END
    QUALIFY row_number() OVER (PARTITION BY n.name ORDER BY p.priority) = 1
),
matched AS (
    SELECT a.trace_id, a.event_id, a.name, a.pid, a.tid, a.ts_ns, a.end_ns, a.dur_ns, r.rule, r.phase
    FROM annotations a JOIN name_rule r USING (name)
),
-- (a, b): b contains a (b.ts <= a.ts and a.end <= b.end) on the same trace and process, a itself included. A range
-- containing another overlaps it, so the pairs are looked for only inside a cluster: the ranges of a (trace,
-- process) sorted by start, a new cluster where a range starts at or after the end of every earlier one. The join
-- on (trace, pid, cluster) costs the sum of the clusters' squared sizes: linear in the steps where steps do not
-- nest (a serving run: 10^5 steps paired by inequalities alone took 80 s), the nested ranges of one step where
-- they do (ours, issue 26). Ranges without a pid never matched the join on pid and stay out.
spans AS (
    SELECT event_id, trace_id, pid, ts_ns, end_ns,
           sum(CASE WHEN prev_end_ns IS NULL OR ts_ns >= prev_end_ns THEN 1 ELSE 0 END)
               OVER (PARTITION BY trace_id, pid ORDER BY ts_ns, event_id ROWS UNBOUNDED PRECEDING) AS cluster
    FROM (SELECT event_id, trace_id, pid, ts_ns, end_ns,
                 max(end_ns) OVER (PARTITION BY trace_id, pid ORDER BY ts_ns, event_id
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
          FROM matched WHERE pid IS NOT NULL)
),
contains AS (
    SELECT a.event_id, b.event_id AS b_event_id, b.ts_ns = a.ts_ns AND b.end_ns = a.end_ns AS same_span
    FROM spans a JOIN spans b
      ON b.trace_id = a.trace_id AND b.pid = a.pid AND b.cluster = a.cluster
     AND b.ts_ns <= a.ts_ns AND a.end_ns <= b.end_ns
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
