-- table: diagnosis
-- grain: one row per trace and scope: the trace (its IL window), each step (annotation start to the later of its end and its kernels' last end) and each phase (its leaf steps together)
-- reads: int_scope_kernels, int_steps, device_busy, device_idle_gaps, int_busy_intervals, taxbreak_by_scope, trace_launch_floor, run_config, int_traces
-- description: The verdict (docs/method.md "The verdict", ours): what bounds the scope, decided from the physical evidence of its GPU window, never from HDBI alone. Evidence per GPU that runs the scope's kernels, summed over them: merged busy time (kernels, memcpys, memsets), idle time by cause (device_idle_gaps: launch arrived late, sync drain, memcpy, other; plus the wait before the GPU's first work, a late launch too), transfer time, and the launch queue (kernel start minus launch call start per launch call, against the trace's T_sys). The rule, in order (thresholds are run_config settings): fewer than verdict_min_kernels kernels or no window -> 'not enough evidence'; kernel busy share >= verdict_device_busy_share -> 'device-bound'; the largest idle cause among late launches, sync drain and transfers, at or above its share setting -> 'host-bound', 'sync-bound' or 'transfer-bound' (late launches unknowable when under verdict_min_launch_coverage of kernels carry their launch call -> 'not enough evidence'); kernel busy share >= verdict_queued_busy_share with at least verdict_queued_launch_share of launches queued longer than verdict_queue_wait_factor x T_sys -> 'device-bound' (the host runs ahead); else 'balanced'. HDBI and HDBI_wall are evidence beside it: where HDBI reads the other way (below 0.5 for a device-bound scope, at or above 0.5 for a host-bound one) the row names the disagreement; a scope with no kernel linked to a framework op has no defined HDBI (T_Orchestrate has no terms, so HDBI reads 1 by construction) and leads with HDBI_wall.
-- column: trace_id: trace key
-- column: scope_kind: 'trace', 'step' or 'phase'
-- column: scope_key: the trace id (trace), int_steps.step_id as text (step), the phase name (phase), as in taxbreak_by_scope
-- column: step_name: step name for step scopes
-- column: phase: phase of the step or phase scope
-- column: window_start_ns: start of the scope's window: the trace's IL start, the step's start, the phase's first step start (ns)
-- column: window_end_ns: end of the window: the trace's IL end, the later of the step's end and its kernels' last end, the phase's last step end (ns)
-- column: window_ns: window length, summed over the leaf steps for a phase (ns)
-- column: gpus: GPUs that run the scope's kernels (GPUs)
-- column: gpu_window_ns: window_ns x gpus, the denominator of every share below (ns)
-- column: kernels: kernels in the scope (kernels)
-- column: launch_coverage: share of the scope's kernels that carry their launch call (fraction)
-- column: busy_ns: merged busy time of those GPUs inside the window (kernels, memcpys, memsets) (ns)
-- column: kernel_busy_ns: merged kernel time of those GPUs inside the window (ns)
-- column: transfer_ns: busy_ns - kernel_busy_ns: memcpy and memset time inside the window while no kernel runs (ns)
-- column: idle_ns: gpu_window_ns - busy_ns (ns)
-- column: idle_launch_late_ns: idle inside the window in gaps whose next kernel was launched after the gap began, plus the wait before the GPU's first work (ns)
-- column: idle_sync_drain_ns: idle in gaps during which a host synchronisation returned (ns)
-- column: idle_memcpy_ns: idle in gaps ended by a memcpy or memset (ns)
-- column: idle_other_ns: idle in other gaps (launched in time but started late: stream dependencies, events, other processes) and after the GPU's last work (ns)
-- column: kernel_busy_share: kernel_busy_ns / gpu_window_ns (fraction)
-- column: busy_share: busy_ns / gpu_window_ns (fraction)
-- column: host_idle_share: idle_launch_late_ns / gpu_window_ns (fraction)
-- column: sync_idle_share: idle_sync_drain_ns / gpu_window_ns (fraction)
-- column: transfer_share: (transfer_ns + idle_memcpy_ns) / gpu_window_ns (fraction)
-- column: other_idle_share: idle_other_ns / gpu_window_ns (fraction)
-- column: launch_samples: launch calls with a kernel in the scope, one sample each (launches)
-- column: median_launch_wait_ns: median kernel start - launch call start over those samples (ns)
-- column: queued_launch_share: share of the samples waiting longer than run_config.verdict_queue_wait_factor x T_sys (fraction)
-- column: t_sys_ns: the trace's launch floor T_sys (ns)
-- column: hdbi: taxbreak_by_scope.hdbi of the scope; NULL where no kernel is linked (undefined there)
-- column: hdbi_linked: taxbreak_by_scope.hdbi_linked of the scope
-- column: linked_fraction: taxbreak_by_scope.linked_fraction of the scope (fraction)
-- column: hdbi_wall: taxbreak_by_scope.hdbi_wall of the scope
-- column: lead_index: 'hdbi' when some kernel is linked, else 'hdbi_wall' (HDBI undefined), else NULL
-- column: bound: 'host-bound', 'device-bound', 'balanced', 'sync-bound', 'transfer-bound' or 'not enough evidence'
-- column: confidence: 'high' (decided with at least run_config.verdict_margin to spare, HDBI_wall agreeing where it applies, launch coverage at least 0.9), 'low' (not enough evidence, within the margin, or launch coverage under verdict_min_launch_coverage), else 'medium' (e.g. HDBI_wall reading the other way, or a host-bound scope whose launches mostly queue)
-- column: reason: the evidence the bound rests on, in one sentence
-- column: hdbi_disagrees: HDBI reads the other way than the bound (below 0.5 for device-bound, at or above 0.5 for host-bound)
-- column: disagreement: what the disagreement is and why the evidence wins; NULL when none
-- column: hdbi_note: why HDBI is not the figure to read in this scope (undefined without linked kernels, or low coverage); NULL otherwise
WITH
cfg AS (SELECT * FROM run_config),
tsys AS (SELECT trace_id, t_sys_ns FROM trace_launch_floor),
stp AS (
    SELECT trace_id, step_id, step_name, phase, step_ts_ns, step_end_ns, is_leaf_step FROM int_steps
),
-- the scopes' windows, the GPUs that run their kernels and their launch queue: int_scope_kernels, its own statement
-- (its sorts and this statement's passes over the GPUs' intervals ran out of memory together at 10 M kernels)
win AS (
    SELECT trace_id, scope_kind, scope_key, step_id, window_start_ns AS w_start, window_end_ns AS w_end, device_ids,
           kernels, launch_coverage, launch_samples, queued_launches, median_launch_wait_ns AS median_wait
    FROM int_scope_kernels WHERE scope_kind <> 'phase'
),
win_gpu AS (
    SELECT w.trace_id, w.scope_kind, w.scope_key, w.w_start, w.w_end, b.device_id, b.first_start_ns,
           b.last_end_ns
    FROM win w JOIN device_busy b ON b.trace_id = w.trace_id AND b.kernels > 0
    WHERE w.scope_kind = 'trace' OR list_contains(w.device_ids, b.device_id)
),
-- the trace's run-local number (tk, int_traces): the interval and probe rows below carry it, not the 64-character
-- trace id (at 10 M kernels 2 x 10 M interval rows are sorted)
tnum AS (SELECT trace_id, trace_key AS tk FROM int_traces),
-- A window's idle time by cause and its kernel busy time are its overlap with a GPU's disjoint intervals of one cause
-- (idle gaps of each cause, kernel busy islands), found without visiting the intervals inside the window (the trace
-- window holds every one of its GPU's 2 x 10 M intervals at 10 M kernels; unnesting and joining them back ran out
-- of memory).  Take one cause's intervals in time order with the running sum of their lengths, C(k) through interval
-- k.  With s the last of them starting at or before the window's start ws and h the last starting before its end
-- we, those overlapping [ws, we) run from s (if it ends after ws, else the next) to h, so their overlap is
--     C(h) - C(s) + max(0, end(s) - ws) - max(0, end(h) - we)
-- (s or h missing: C = 0, no clip).  Each window edge is one probe per cause; its s or h, with C, comes from one
-- ordered pass over the intervals and probes of a cause and GPU together (ivl_hit), so a window's overlap is the sum
-- of its two probes' signed terms.  (Windows never end before they start: int_scope_kernels.)
wg AS MATERIALIZED (SELECT row_number() OVER () AS wrow, w.*, t.tk FROM win_gpu w JOIN tnum t USING (trace_id)),
wprobe AS (
    SELECT wrow, tk, device_id, w_start AS p, false AS is_hi FROM wg
    UNION ALL
    SELECT wrow, tk, device_id, w_end - 1, true FROM wg
),
-- the window's edges: before the GPU's first work of the trace (it waits for the host's first launch) and after its last
edge_w AS (
    SELECT trace_id, scope_kind, scope_key, count(*) AS gpus, any_value(w_end - w_start) AS window_ns,
           sum(greatest(0, least(first_start_ns, w_end) - w_start)) AS lead_ns,
           sum(greatest(0, w_end - greatest(last_end_ns, w_start))) AS tail_ns
    FROM win_gpu GROUP BY trace_id, scope_kind, scope_key
),
-- a GPU's idle gaps (by their cause) and kernel busy islands (cause 'busy': each GPU's kernels merged into disjoint
-- intervals, int_busy_intervals set 'gpu_kernels', the one interval union), each numbered in time order (the number
-- breaks ties of equal starts)
ivl AS (
    SELECT g.cause, t.tk, g.device_id, g.gap_seq AS seq, g.gap_start_ns AS start_ns, g.gap_end_ns AS end_ns
    FROM device_idle_gaps g JOIN tnum t USING (trace_id)
    UNION ALL
    SELECT 'busy', t.tk, b.device_id, row_number() OVER (PARTITION BY t.tk, b.device_id ORDER BY b.busy_start_ns),
           b.busy_start_ns, b.busy_end_ns
    FROM int_busy_intervals b JOIN tnum t USING (trace_id)
    WHERE b.busy_set = 'gpu_kernels'
),
-- each probe's interval (the last of its cause that starts at or before it) and the running sum through it, by one
-- ordered pass, not an ASOF join: DuckDB's ASOF join holds each partition of the intervals pinned in memory ("failed
-- to pin block" at 10 M kernels), where a window's partitions spill.  An interval sorts before a probe at the same
-- time (start_ns <= p); probes add nothing to the sum.
ivl_pts AS (
    SELECT cause, tk, device_id, start_ns AS t, 0 AS ord, seq, end_ns, end_ns - start_ns AS len_ns,
           NULL::BIGINT AS wrow, NULL::BOOLEAN AS is_hi
    FROM ivl
    UNION ALL
    SELECT c.cause, q.tk, q.device_id, q.p, 1, NULL, NULL, 0, q.wrow, q.is_hi
    FROM wprobe q CROSS JOIN (VALUES ('launch_late'), ('sync_drain'), ('memcpy'), ('other'), ('busy')) c(cause)
),
ivl_hit AS (
    SELECT * FROM (
        SELECT wrow, cause, is_hi, t AS p, last_value(end_ns IGNORE NULLS) OVER w AS end_ns, sum(len_ns) OVER w AS c_ns
        FROM ivl_pts
        WINDOW w AS (PARTITION BY cause, tk, device_id ORDER BY t, ord, seq ROWS UNBOUNDED PRECEDING)
    ) WHERE wrow IS NOT NULL
),
-- idle by cause, and kernel busy time, per window: its GPUs' probes' terms summed, + C(h) - clip at the end probe
-- (p = we - 1), - C(s) + clip at the start probe (p = ws)
ivl_term AS (
    SELECT wrow, cause,
           CASE WHEN is_hi THEN c_ns - greatest(0, end_ns - p - 1) ELSE greatest(0, end_ns - p) - c_ns END AS term_ns
    FROM ivl_hit
),
ivl_w AS (
    SELECT g.trace_id, g.scope_kind, g.scope_key,
           sum(q.term_ns) FILTER (WHERE q.cause = 'launch_late') AS late_ns,
           sum(q.term_ns) FILTER (WHERE q.cause = 'sync_drain') AS sync_ns,
           sum(q.term_ns) FILTER (WHERE q.cause = 'memcpy') AS memcpy_ns,
           sum(q.term_ns) FILTER (WHERE q.cause = 'other') AS other_ns,
           sum(q.term_ns) FILTER (WHERE q.cause = 'busy') AS kernel_busy_ns
    FROM ivl_term q JOIN wg g USING (wrow)
    GROUP BY g.trace_id, g.scope_kind, g.scope_key
),
ev_ts AS (
    SELECT w.trace_id, w.scope_kind, w.scope_key, coalesce(e.gpus, 0) AS gpus,
           coalesce(e.window_ns, w.w_end - w.w_start) AS window_ns,
           CAST(coalesce(e.window_ns * e.gpus, 0) AS BIGINT) AS gpu_window_ns,
           coalesce(w.kernels, 0) AS kernels, w.launch_coverage, coalesce(w.launch_samples, 0) AS launch_samples,
           w.median_wait, w.queued_launches,
           CAST(coalesce(g.late_ns, 0) + coalesce(e.lead_ns, 0) AS BIGINT) AS idle_launch_late_ns,
           CAST(coalesce(g.sync_ns, 0) AS BIGINT) AS idle_sync_drain_ns,
           CAST(coalesce(g.memcpy_ns, 0) AS BIGINT) AS idle_memcpy_ns,
           CAST(coalesce(g.other_ns, 0) + coalesce(e.tail_ns, 0) AS BIGINT) AS idle_other_ns,
           CAST(coalesce(g.kernel_busy_ns, 0) AS BIGINT) AS kernel_busy_ns
    FROM win w
    LEFT JOIN edge_w e USING (trace_id, scope_kind, scope_key)
    LEFT JOIN ivl_w g USING (trace_id, scope_kind, scope_key)
),
-- a phase: its leaf steps' evidence summed
ev AS (
    SELECT trace_id, scope_kind, scope_key, gpus, window_ns, gpu_window_ns, kernels, launch_coverage, launch_samples,
           median_wait, queued_launches, idle_launch_late_ns, idle_sync_drain_ns, idle_memcpy_ns, idle_other_ns, kernel_busy_ns
    FROM ev_ts
    UNION ALL
    SELECT v.trace_id, 'phase', s.phase, max(v.gpus), sum(v.window_ns), sum(v.gpu_window_ns), sum(v.kernels),
           sum(v.launch_coverage * v.kernels) / nullif(sum(v.kernels), 0), sum(v.launch_samples),
           any_value(m.median_launch_wait_ns), sum(v.queued_launches), sum(v.idle_launch_late_ns), sum(v.idle_sync_drain_ns),
           sum(v.idle_memcpy_ns), sum(v.idle_other_ns), sum(v.kernel_busy_ns)
    FROM ev_ts v JOIN stp s ON s.trace_id = v.trace_id AND CAST(s.step_id AS VARCHAR) = v.scope_key
    LEFT JOIN int_scope_kernels m ON m.trace_id = s.trace_id AND m.scope_kind = 'phase' AND m.scope_key = s.phase
    WHERE v.scope_kind = 'step' AND s.is_leaf_step AND s.phase IS NOT NULL
    GROUP BY v.trace_id, s.phase
),
-- the shares the rule reads
sh AS (
    SELECT v.*, t.t_sys_ns,
           CAST(v.idle_launch_late_ns + v.idle_sync_drain_ns + v.idle_memcpy_ns + v.idle_other_ns AS BIGINT) AS idle_ns,
           CAST(v.median_wait AS BIGINT) AS median_launch_wait_ns,
           CAST(v.queued_launches AS BIGINT) / nullif(CAST(v.launch_samples AS BIGINT), 0) AS queued_launch_share
    FROM ev v LEFT JOIN tsys t USING (trace_id) CROSS JOIN cfg c
),
sh2 AS (
    SELECT s.*, greatest(s.gpu_window_ns - s.idle_ns, 0) AS busy_ns,
           greatest(s.gpu_window_ns - s.idle_ns - s.kernel_busy_ns, 0) AS transfer_ns,
           s.kernel_busy_ns / nullif(s.gpu_window_ns, 0) AS kernel_busy_share,
           greatest(s.gpu_window_ns - s.idle_ns, 0) / nullif(s.gpu_window_ns, 0) AS busy_share,
           s.idle_launch_late_ns / nullif(s.gpu_window_ns, 0) AS host_idle_share,
           s.idle_sync_drain_ns / nullif(s.gpu_window_ns, 0) AS sync_idle_share,
           least(1.0, (greatest(s.gpu_window_ns - s.idle_ns - s.kernel_busy_ns, 0) + s.idle_memcpy_ns)
                 / nullif(s.gpu_window_ns, 0)) AS transfer_share,
           s.idle_other_ns / nullif(s.gpu_window_ns, 0) AS other_idle_share
    FROM sh s
),
-- the rule (docs/method.md "The verdict", ours): the first branch that holds decides; `margin` is how far the
-- deciding share lies past its threshold
decided AS (
    SELECT d.*,
        CASE
            WHEN d.kernels < c.verdict_min_kernels OR coalesce(d.gpu_window_ns, 0) <= 0 THEN 'not enough evidence'
            WHEN d.kernel_busy_share >= c.verdict_device_busy_share THEN 'device-bound'
            WHEN d.launch_coverage < c.verdict_min_launch_coverage
                 AND d.idle_launch_late_ns + d.idle_other_ns >= d.idle_sync_drain_ns + d.idle_memcpy_ns + d.transfer_ns
                THEN 'not enough evidence'
            WHEN d.host_idle_share >= c.verdict_host_idle_share
                 AND d.host_idle_share >= greatest(d.sync_idle_share, d.transfer_share) THEN 'host-bound'
            WHEN d.sync_idle_share >= c.verdict_sync_idle_share AND d.sync_idle_share >= d.transfer_share
                THEN 'sync-bound'
            WHEN d.transfer_share >= c.verdict_transfer_share THEN 'transfer-bound'
            WHEN d.kernel_busy_share >= c.verdict_queued_busy_share
                 AND coalesce(d.queued_launch_share, 0) >= c.verdict_queued_launch_share THEN 'device-bound'
            ELSE 'balanced'
        END AS bound,
        c.verdict_margin, c.verdict_device_busy_share, c.verdict_host_idle_share, c.verdict_sync_idle_share,
        c.verdict_transfer_share, c.verdict_queued_busy_share, c.verdict_queued_launch_share,
        c.verdict_min_kernels, c.verdict_min_launch_coverage, c.verdict_queue_wait_factor
    FROM sh2 d CROSS JOIN cfg c
),
-- HDBI evidence of the same scope
hx AS (
    SELECT d.*, z.step_name, z.phase AS z_phase, z.linked_kernels,
           CASE WHEN z.linked_kernels > 0 THEN z.hdbi END AS hdbi, z.hdbi_linked, z.linked_fraction, z.hdbi_wall,
           z.low_coverage,
           CASE WHEN d.bound = 'device-bound' AND d.kernel_busy_share >= d.verdict_device_busy_share
                    THEN d.kernel_busy_share - d.verdict_device_busy_share
                WHEN d.bound = 'device-bound'
                    THEN least(d.kernel_busy_share - d.verdict_queued_busy_share,
                               d.queued_launch_share - d.verdict_queued_launch_share)
                WHEN d.bound = 'host-bound' THEN d.host_idle_share - d.verdict_host_idle_share
                WHEN d.bound = 'sync-bound' THEN d.sync_idle_share - d.verdict_sync_idle_share
                WHEN d.bound = 'transfer-bound' THEN d.transfer_share - d.verdict_transfer_share
                WHEN d.bound = 'balanced'
                    THEN least(d.verdict_device_busy_share - d.kernel_busy_share,
                               d.verdict_host_idle_share - d.host_idle_share)
            END AS margin
    FROM decided d
    LEFT JOIN taxbreak_by_scope z ON z.trace_id = d.trace_id AND z.scope_kind = d.scope_kind AND z.scope_key = d.scope_key
)
SELECT
    h.trace_id,
    h.scope_kind,
    h.scope_key,
    h.step_name,
    CASE WHEN h.scope_kind = 'phase' THEN h.scope_key ELSE h.z_phase END AS phase,
    CASE h.scope_kind WHEN 'trace' THEN w.w_start WHEN 'step' THEN w.w_start
        ELSE (SELECT min(step_ts_ns) FROM stp s WHERE s.trace_id = h.trace_id AND s.phase = h.scope_key AND s.is_leaf_step) END
        AS window_start_ns,
    CASE h.scope_kind WHEN 'trace' THEN w.w_end WHEN 'step' THEN w.w_end
        ELSE (SELECT max(step_end_ns) FROM stp s WHERE s.trace_id = h.trace_id AND s.phase = h.scope_key AND s.is_leaf_step) END
        AS window_end_ns,
    CAST(h.window_ns AS BIGINT) AS window_ns,
    CAST(h.gpus AS BIGINT) AS gpus,
    CAST(h.gpu_window_ns AS BIGINT) AS gpu_window_ns,
    CAST(h.kernels AS BIGINT) AS kernels,
    h.launch_coverage,
    CAST(h.busy_ns AS BIGINT) AS busy_ns,
    CAST(h.kernel_busy_ns AS BIGINT) AS kernel_busy_ns,
    CAST(h.transfer_ns AS BIGINT) AS transfer_ns,
    CAST(h.idle_ns AS BIGINT) AS idle_ns,
    CAST(h.idle_launch_late_ns AS BIGINT) AS idle_launch_late_ns,
    CAST(h.idle_sync_drain_ns AS BIGINT) AS idle_sync_drain_ns,
    CAST(h.idle_memcpy_ns AS BIGINT) AS idle_memcpy_ns,
    CAST(h.idle_other_ns AS BIGINT) AS idle_other_ns,
    h.kernel_busy_share,
    h.busy_share,
    h.host_idle_share,
    h.sync_idle_share,
    h.transfer_share,
    h.other_idle_share,
    CAST(h.launch_samples AS BIGINT) AS launch_samples,
    h.median_launch_wait_ns,
    h.queued_launch_share,
    h.t_sys_ns,
    h.hdbi,
    h.hdbi_linked,
    h.linked_fraction,
    h.hdbi_wall,
    CASE WHEN h.linked_kernels > 0 THEN 'hdbi' WHEN h.hdbi_wall IS NOT NULL THEN 'hdbi_wall' END AS lead_index,
    h.bound,
    CASE
        WHEN h.bound = 'not enough evidence' THEN 'low'
        WHEN h.margin < h.verdict_margin OR coalesce(h.launch_coverage, 0) < h.verdict_min_launch_coverage THEN 'low'
        WHEN coalesce(h.launch_coverage, 0) >= 0.9
             AND NOT (h.bound = 'host-bound' AND coalesce(h.queued_launch_share, 0) >= h.verdict_queued_launch_share)
             AND (h.bound NOT IN ('host-bound', 'device-bound') OR h.hdbi_wall IS NULL
                  OR (h.bound = 'host-bound' AND h.hdbi_wall < 0.5) OR (h.bound = 'device-bound' AND h.hdbi_wall >= 0.5))
            THEN 'high'
        ELSE 'medium'
    END AS confidence,
    CASE h.bound
        WHEN 'not enough evidence' THEN
            CASE WHEN h.kernels < h.verdict_min_kernels
                     THEN printf('%d kernel(s) in the scope, fewer than the %d the verdict needs', h.kernels, h.verdict_min_kernels)
                 WHEN coalesce(h.gpu_window_ns, 0) <= 0 THEN 'the scope has no GPU window'
                 ELSE printf('the GPU idles %.0f%% of the window but only %.0f%% of the kernels carry their launch call, so late launches cannot be told from other waits',
                             100 * (1 - h.busy_share), 100 * h.launch_coverage) END
        WHEN 'device-bound' THEN
            CASE WHEN h.kernel_busy_share >= h.verdict_device_busy_share
                     THEN printf('kernels keep the GPU busy %.0f%% of the window (at least %.0f%% is device-bound)',
                                 100 * h.kernel_busy_share, 100 * h.verdict_device_busy_share)
                 ELSE printf('kernels keep the GPU busy %.0f%% of the window and %.0f%% of launches wait more than %gx T_sys to start (median %.1f us): the host runs ahead of the GPU',
                             100 * h.kernel_busy_share, 100 * h.queued_launch_share, h.verdict_queue_wait_factor,
                             h.median_launch_wait_ns / 1e3) END
        WHEN 'host-bound' THEN printf('the GPU waits for late launches %.0f%% of the window (busy %.0f%%): the host does not issue work fast enough',
                                     100 * h.host_idle_share, 100 * h.busy_share)
        WHEN 'sync-bound' THEN printf('the GPU idles %.0f%% of the window while the host synchronises and issues the next work (busy %.0f%%)',
                                     100 * h.sync_idle_share, 100 * h.busy_share)
        WHEN 'transfer-bound' THEN printf('memcpys and memsets, and the gaps they end, take %.0f%% of the window',
                                         100 * h.transfer_share)
        ELSE printf('neither side dominates: the GPU is busy %.0f%% of the window, late launches idle it %.0f%%, syncs %.0f%%, transfers %.0f%%, other waits %.0f%%',
                    100 * h.busy_share, 100 * h.host_idle_share, 100 * h.sync_idle_share, 100 * h.transfer_share,
                    100 * h.other_idle_share)
    END AS reason,
    coalesce(h.linked_kernels > 0 AND ((h.bound = 'device-bound' AND h.hdbi < 0.5) OR (h.bound = 'host-bound' AND h.hdbi >= 0.5)),
             false) AS hdbi_disagrees,
    CASE
        WHEN h.linked_kernels > 0 AND h.bound = 'device-bound' AND h.hdbi < 0.5 THEN
            printf('HDBI %.3f reads host-leaning, but the GPU is busy %.0f%% of the window: the paper''s per-kernel host prefixes count host time that overlaps GPU work (docs/method.md section 2), so the evidence decides%s',
                   h.hdbi, 100 * h.busy_share,
                   CASE WHEN h.hdbi_wall IS NOT NULL THEN printf('; HDBI_wall %.3f', h.hdbi_wall) ELSE '' END)
        WHEN h.linked_kernels > 0 AND h.bound = 'host-bound' AND h.hdbi >= 0.5 THEN
            printf('HDBI %.3f reads device-leaning, but the GPU waits for late launches %.0f%% of the window: the device time HDBI counts runs in bursts the host cannot feed, so the evidence decides%s',
                   h.hdbi, 100 * h.host_idle_share,
                   CASE WHEN h.hdbi_wall IS NOT NULL THEN printf('; HDBI_wall %.3f', h.hdbi_wall) ELSE '' END)
    END AS disagreement,
    CASE
        WHEN coalesce(h.linked_kernels, 0) = 0 AND h.kernels > 0 THEN
            'HDBI is undefined here: no kernel is linked to a framework op, so T_Orchestrate has no terms and HDBI would read 1.000 by construction; read HDBI_wall and the evidence'
        WHEN h.low_coverage THEN
            printf('HDBI covers %.0f%% of the kernels: orphans inflate it; read HDBI_linked and HDBI_wall', 100 * h.linked_fraction)
    END AS hdbi_note
FROM hx h
LEFT JOIN win w ON w.trace_id = h.trace_id AND w.scope_kind = h.scope_kind AND w.scope_key = h.scope_key
