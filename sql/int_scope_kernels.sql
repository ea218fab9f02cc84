-- table: int_scope_kernels
-- grain: one row per trace and verdict scope (diagnosis): the trace, each step, each phase (its leaf steps together)
-- reads: kernel_taxbreak, int_steps, skip_by_trace, trace_launch_floor, run_config
-- materialize: temp
-- description: The kernel side of the verdict's evidence (docs/method.md "The verdict", ours): the kernels of each scope and their launch queue. A step holds the kernels its process launched inside it (nested steps included: the kernel's launch call start, else its own start, in [step start, step end)), and its window ends at the later of its end and its kernels' last end; the trace's window is its IL window. Trace and step rows carry the window, the GPUs that run the scope's kernels, the kernel and launch counts; a phase row carries only its median launch wait (diagnosis sums the rest from its leaf steps' rows). Its own statement, apart from diagnosis, so that its sorts (each process's kernels by anchor, each scope's launch waits) and diagnosis' passes over the GPUs' intervals never share one statement's memory: together they ran out of a 488 MiB memory_limit at 10 M kernels ("failed to pin block"), where each fits alone. A run-local table, never kept in the warehouse.
-- column: trace_id: trace key
-- column: scope_kind: 'trace', 'step' or 'phase'
-- column: scope_key: the trace id (trace), int_steps.step_id as text (step), the phase name (phase)
-- column: step_id: int_steps.step_id of a step scope; NULL otherwise
-- column: window_start_ns: the scope's window start: the trace's IL start, the step's start; NULL for a phase (ns)
-- column: window_end_ns: the window end: the trace's IL end, the later of the step's end and its kernels' last end; NULL for a phase (ns)
-- column: device_ids: the GPUs that run a step's kernels; NULL for the trace (every GPU with kernels) and a phase
-- column: kernels: kernels in a trace or step scope; NULL where none (kernels)
-- column: launch_coverage: share of those kernels that carry their launch call (fraction)
-- column: launch_samples: launch calls with a kernel in the scope, one sample each (launches)
-- column: queued_launches: samples waiting longer than run_config.verdict_queue_wait_factor x T_sys (launches)
-- column: median_launch_wait_ns: median kernel start - launch call start over the samples, exactly as median() gives it (DOUBLE: the mean of the two middle samples for an even count); NULL without samples (ns)
WITH
cfg AS (SELECT * FROM run_config),
tsys AS (SELECT trace_id, t_sys_ns FROM trace_launch_floor),
-- the kernels of a scope; a step holds the kernels its process launched inside it (nested steps included)
stp AS (
    SELECT trace_id, step_id, phase, pid, step_ts_ns, step_end_ns, is_leaf_step FROM int_steps
),
k AS (
    SELECT trace_id, pid, device_id, kernel_ts_ns, kernel_end_ns, has_launch, is_charged, t_launch_obs_ns,
           coalesce(launch_ts_ns, kernel_ts_ns) AS anchor_ns
    FROM kernel_taxbreak
),
-- A join on (trace, pid) filtered by the anchor compared every kernel with every step of its process (1 M kernels,
-- 1,000 steps: 10^9 pairs, 7.7 s).  Instead one ordered pass numbers a process's kernels by anchor and finds, for
-- each step bound, how many kernels anchor before it (a bound sorts before kernels at its own time: the start is
-- inclusive, the end exclusive); a step's kernels are then the numbers (before its start, before its end], found by
-- equality.  Kernels tied at one anchor are all in or all out of a step, so their order among themselves is free.
stpn AS MATERIALIZED (
    SELECT row_number() OVER () AS srow, trace_id, step_id, pid, step_ts_ns, step_end_ns FROM stp
    WHERE trace_id IS NOT NULL AND pid IS NOT NULL AND step_ts_ns IS NOT NULL AND step_end_ns IS NOT NULL
),
kpos AS (
    SELECT trace_id, pid, t, ord, srow, is_end, device_id, kernel_end_ns, has_launch, is_charged, t_launch_obs_ns,
           CAST(sum(ord) OVER (PARTITION BY hash(trace_id, pid) ORDER BY t, ord ROWS UNBOUNDED PRECEDING) AS BIGINT) AS n
    FROM (
        SELECT trace_id, pid, anchor_ns AS t, 1 AS ord, NULL::BIGINT AS srow, NULL::BOOLEAN AS is_end, device_id,
               kernel_end_ns, has_launch, is_charged, t_launch_obs_ns
        FROM k WHERE trace_id IS NOT NULL AND pid IS NOT NULL AND anchor_ns IS NOT NULL
        UNION ALL
        SELECT trace_id, pid, step_ts_ns, 0, srow, false, NULL, NULL, NULL, NULL, NULL FROM stpn
        UNION ALL
        SELECT trace_id, pid, step_end_ns, 0, srow, true, NULL, NULL, NULL, NULL, NULL FROM stpn
    )
),
srange AS (
    SELECT s.trace_id, s.step_id, s.pid, b.lo, b.hi
    FROM (SELECT srow, max(n) FILTER (WHERE NOT is_end) AS lo, max(n) FILTER (WHERE is_end) AS hi
          FROM kpos WHERE ord = 0 GROUP BY srow) b
    JOIN stpn s USING (srow)
    WHERE b.hi > b.lo
),
sk AS (
    SELECT s.trace_id, s.step_id, k.device_id, k.kernel_end_ns, k.has_launch, k.is_charged, k.t_launch_obs_ns
    FROM (SELECT trace_id, step_id, pid, unnest(range(greatest(lo + 1, blk * 2048), least(hi, blk * 2048 + 2047) + 1)) AS n
          FROM (SELECT *, unnest(range((lo + 1) // 2048, hi // 2048 + 1)) AS blk FROM srange)) s
    JOIN (SELECT * FROM kpos WHERE ord = 1) k ON k.trace_id = s.trace_id AND k.pid = s.pid AND k.n = s.n
),
-- windows: one per (trace, scope); a step's GPUs are those that run its kernels
win AS (
    SELECT trace_id, 'trace' AS scope_kind, trace_id AS scope_key, CAST(NULL AS BIGINT) AS step_id,
           il_start_ns AS w_start, il_end_ns AS w_end, NULL AS device_ids
    FROM skip_by_trace
    UNION ALL
    SELECT s.trace_id, 'step', CAST(s.step_id AS VARCHAR), s.step_id, s.step_ts_ns,
           greatest(s.step_end_ns, coalesce(max(sk.kernel_end_ns), s.step_end_ns)),
           list(DISTINCT sk.device_id) FILTER (WHERE sk.device_id IS NOT NULL)
    FROM stp s LEFT JOIN sk USING (trace_id, step_id)
    GROUP BY s.trace_id, s.step_id, s.step_ts_ns, s.step_end_ns
),
-- kernels and launch samples per scope; the launches queued longer than verdict_queue_wait_factor x T_sys are
-- counted here (a list of every wait of the scope, filtered later, held 10 M numbers in one list for the trace
-- scope at 10 M kernels: a list cannot spill)
kq AS (
    SELECT trace_id, 'trace' AS scope_kind, trace_id AS scope_key, count(*) AS kernels,
           avg(CASE WHEN has_launch THEN 1.0 ELSE 0.0 END) AS launch_coverage,
           count(*) FILTER (WHERE is_charged AND has_launch) AS launch_samples,
           count(*) FILTER (WHERE is_charged AND has_launch
                            AND t_launch_obs_ns > c.verdict_queue_wait_factor * t.t_sys_ns) AS queued_launches
    FROM k LEFT JOIN tsys t USING (trace_id) CROSS JOIN cfg c GROUP BY trace_id
    UNION ALL
    SELECT trace_id, 'step', CAST(step_id AS VARCHAR), count(*),
           avg(CASE WHEN has_launch THEN 1.0 ELSE 0.0 END),
           count(*) FILTER (WHERE is_charged AND has_launch),
           count(*) FILTER (WHERE is_charged AND has_launch
                            AND t_launch_obs_ns > c.verdict_queue_wait_factor * t.t_sys_ns)
    FROM sk LEFT JOIN tsys t USING (trace_id) CROSS JOIN cfg c GROUP BY trace_id, step_id
),
-- The median launch wait of every scope (docs/method.md "The verdict": the launch queue, one sample per launch call),
-- by sort: median() holds a group's every value in one vector in memory, which cannot spill (the trace scope at 10 M
-- kernels grew it to 2^24 values, one 128 MiB allocation past a 488 MiB memory_limit), while a window's sort spills.
-- Each scope gets a number (sid) so the sort compares numbers, not 64-character trace ids (292 k samples: 0.13 s of
-- CPU instead of 0.3 s); the trace, step and phase scopes share the one sort below.
wsc AS MATERIALIZED (
    SELECT row_number() OVER () AS sid, * FROM (
        SELECT DISTINCT trace_id, scope_kind, scope_key, step_id, NULL::VARCHAR AS phase FROM win
        UNION ALL
        SELECT DISTINCT trace_id, 'phase', phase, NULL, phase FROM stp WHERE is_leaf_step AND phase IS NOT NULL
    )
),
-- the scopes a step's samples count in: the step, and its phase when it is a leaf step
wstep AS (
    SELECT trace_id, step_id, sid FROM wsc WHERE scope_kind = 'step'
    UNION ALL
    SELECT s.trace_id, s.step_id, c.sid
    FROM stp s JOIN wsc c ON c.trace_id = s.trace_id AND c.phase = s.phase
    WHERE s.is_leaf_step
),
-- the samples: a trace's charged launches, a step's (sk), a phase's (its leaf steps' sk rows); NULLs left out, as
-- median() leaves them
wait_v AS (
    SELECT c.sid, k.t_launch_obs_ns AS v
    FROM k JOIN (SELECT sid, trace_id FROM wsc WHERE scope_kind = 'trace') c USING (trace_id)
    WHERE k.is_charged AND k.has_launch AND k.t_launch_obs_ns IS NOT NULL
    UNION ALL
    SELECT w.sid, x.t_launch_obs_ns
    FROM sk x JOIN wstep w USING (trace_id, step_id)
    WHERE x.is_charged AND x.has_launch AND x.t_launch_obs_ns IS NOT NULL
),
-- the median read off a scope's sorted samples (0-based r of n) exactly as DuckDB's median(BIGINT), quantile_cont(v,
-- 0.5), computes it: the (n - 1) // 2-th and n // 2-th, each cast to DOUBLE, interpolated as lo * (1 - 0.5) + hi * 0.5
-- (both halves exact, one rounding; lo itself for odd n).  Not lo + (hi - lo) / 2: past 2^53 its subtraction rounds
-- too, and it can differ in the last bit.  A scope without samples has no row here: NULL, as median() gives.
wait_m AS (
    SELECT sid, CAST(max(v) FILTER (WHERE r = (n - 1) // 2) AS DOUBLE) * 0.5
                + CAST(max(v) FILTER (WHERE r = n // 2) AS DOUBLE) * 0.5 AS median_wait
    FROM (SELECT sid, v, row_number() OVER w - 1 AS r,
                 count(*) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS n
          FROM wait_v WINDOW w AS (PARTITION BY sid ORDER BY v))
    WHERE r = (n - 1) // 2 OR r = n // 2
    GROUP BY sid
),
wait_med AS (
    SELECT c.trace_id, c.scope_kind, c.scope_key, m.median_wait FROM wait_m m JOIN wsc c USING (sid)
)
SELECT w.trace_id, w.scope_kind, w.scope_key, w.step_id, w.w_start AS window_start_ns, w.w_end AS window_end_ns,
       w.device_ids, q.kernels, q.launch_coverage, q.launch_samples, q.queued_launches,
       m.median_wait AS median_launch_wait_ns
FROM win w
LEFT JOIN kq q USING (trace_id, scope_kind, scope_key)
LEFT JOIN wait_med m USING (trace_id, scope_kind, scope_key)
UNION ALL
SELECT c.trace_id, c.scope_kind, c.scope_key, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, m.median_wait
FROM wsc c LEFT JOIN wait_med m USING (trace_id, scope_kind, scope_key)
WHERE c.scope_kind = 'phase'
