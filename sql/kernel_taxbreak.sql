-- table: kernel_taxbreak
-- grain: one row per kernel invocation
-- reads: int_kernel_links, int_steps, trace_launch_floor, int_kernel_names, stg_events, int_traces
-- description: The TaxBreak decomposition per kernel (METHOD.md section 2, paper-compatible mode). Host costs are charged once per launch call (is_charged): the other kernels of a graph launch carry 0, orphans carry NULL. For a charged linked kernel delta_ft_ns + delta_ct_ns + delta_kt_ns = t_py_ns + max(t_dispatch_ns, t_dispatch_base_ns if i_lib = 1) + t_sys_ns.
-- column: trace_id: trace key
-- column: kernel_seq: kernel position in the trace (see int_kernel_links)
-- column: pid: launching host process
-- column: device_id: GPU index
-- column: kernel_name: kernel name
-- column: op_name: framework op name
-- column: op_namespace: framework op namespace
-- column: step_id: innermost step containing the kernel's launch call (its start when it has none); NULL outside every step and for leftovers of before the trace (a kernel with no launch whose correlation id is below every launch correlation id of its process)
-- column: step_name: that step's name
-- column: phase: that step's phase
-- column: kernel_ts_ns: kernel start (ns)
-- column: kernel_end_ns: kernel end (ns)
-- column: kernel_dur_ns: kernel duration (ns)
-- column: launch_ts_ns: launch call start (ns)
-- column: is_linked: launch call and framework op found
-- column: is_charged: linked and carrying its launch call's host cost (one kernel per launch call)
-- column: is_graph_launch: fed by a graph launch
-- column: has_launch: a launch call was found
-- column: has_py: a Python-level op was found; t_py_ns is 0 otherwise
-- column: i_lib: 1 when the kernel goes through a vendor-library front end, else 0
-- column: i_lib_rule: what decided i_lib: 'library_api_range' (the trace has library ranges), a lib_kernel_rules rule name (int_kernel_names: matched on the kernel's own name or its signature), or 'no_rule_matched'
-- column: t_py_ns: framework op start minus Python-level op start (ns)
-- column: t_dispatch_ns: launch call start minus framework op start (ns)
-- column: t_launch_obs_ns: kernel start minus launch call start; may be negative (ns)
-- column: t_dispatch_base_ns: the trace's T_dispatch_base: median t_dispatch_ns over charged linked kernels with i_lib = 0 and t_dispatch_ns > 100 (paper Eq. 5; for an even count the mean of the two middle samples, rounded to the nearest ns, halves away from zero) (ns)
-- column: t_sys_ns: launch floor T_sys of the trace (ns)
-- column: t_dispatch_blocked_ns: diagnostic (ours): the part of [op start, launch start) the launching thread spent inside other launch or sync calls (an op's second kernel carries its first launch's wait in t_dispatch); 0 for uncharged, NULL for orphans (ns)
-- column: delta_ft_ns: framework translation t_py + (i_lib ? T_dispatch_base : t_dispatch); base missing: t_dispatch (ns)
-- column: delta_ct_ns: CUDA-library translation i_lib ? max(0, t_dispatch - T_dispatch_base) : 0 (ns)
-- column: delta_kt_ns: kernel launch path, T_sys (ns)
-- column: delta_kt_excess_ns: max(0, t_launch_obs - T_sys), diagnostic only (ns)
WITH
-- only the columns read below: int_kernel_links' other texts (launch, Python and library names, link methods)
-- would ride through every join for nothing.  The per-kernel joins below key on (tk, kernel_seq), tk the trace's
-- run-local number (int_traces), not on the 64-character trace id text (1 M kernels: 3 such joins and a dedup took
-- 7 s of operator time on the text), and the per-process ones on ppk, a hash of (trace id, pid) (NULL without a pid,
-- which matches nothing, as pid = pid did): keyed on the two texts, the lookup of each kernel's step levels was the
-- part of this statement that needed the most memory (1 M kernels: it ran out under a 250MB memory_limit, the whole
-- statement now finishes under 150MB; at 10 M kernels it ran out under the default 512MB)
k AS (
    SELECT trace_id, t.trace_key AS tk, kernel_seq, pid, device_id, kernel_name, op_name, op_namespace, correlation_id, launch_tid,
           kernel_ts_ns, kernel_end_ns, kernel_dur_ns, launch_ts_ns, op_ts_ns, py_ts_ns, is_linked,
           is_charged_launch, is_graph_launch, has_launch, has_py, has_lib,
           CASE WHEN pid IS NOT NULL THEN hash(trace_id, pid) END AS ppk
    FROM int_kernel_links JOIN int_traces t USING (trace_id)
),
lib_traces AS (SELECT DISTINCT trace_id FROM stg_events WHERE host_call_class = 'library'),
-- The library name rules match the kernel's own name (return type, template arguments and parameters removed) or
-- its signature (METHOD.md section 2): int_kernel_names decides them once per distinct name.
name_rule AS (SELECT kernel_name, name_i_lib AS i_lib, name_rule AS rule FROM int_kernel_names),
-- Steps are matched on the kernel's process; a process without steps of its own (steps recorded by another
-- process than the launches, as in HTA's Triton example) takes the steps of the trace's process with the most
-- steps, by time (ours).
step_pids AS (SELECT trace_id, pid, count(*) AS n FROM int_steps GROUP BY ALL),
main_step_pid AS (SELECT trace_id, arg_max(pid, (n, pid)) AS step_pid FROM step_pids GROUP BY trace_id),
kernel_step_pid AS (
    SELECT DISTINCT k.trace_id, k.pid, coalesce(sp.pid, m.step_pid) AS step_pid
    FROM k JOIN main_step_pid m USING (trace_id) LEFT JOIN step_pids sp ON sp.trace_id = k.trace_id AND sp.pid = k.pid
),
step_levels AS (
    SELECT DISTINCT CASE WHEN p.pid IS NOT NULL THEN hash(p.trace_id, p.pid) END AS ppk, p.trace_id, p.step_pid,
           s.step_level
    FROM kernel_step_pid p JOIN int_steps s ON s.trace_id = p.trace_id AND s.pid = p.step_pid
),
-- Correlation ids grow per process: a kernel without a launch whose id is below the first launch's was launched
-- before the trace window (leftovers of a warm-up step, METHOD.md section 2) and belongs to no step.
first_launch AS (
    SELECT ppk, min(correlation_id) AS first_corr FROM k WHERE launch_ts_ns IS NOT NULL GROUP BY ALL
),
kq AS (
    SELECT k.tk, k.kernel_seq, hash(s.trace_id, s.step_pid) AS step_pk, s.step_level,
           CASE WHEN k.launch_ts_ns IS NOT NULL THEN k.launch_ts_ns
                WHEN k.correlation_id < f.first_corr THEN NULL
                ELSE k.kernel_ts_ns END AS host_ts_ns
    FROM k JOIN step_levels s ON k.ppk = s.ppk AND s.step_pid IS NOT NULL
    LEFT JOIN first_launch f ON f.ppk = k.ppk
),
kstep AS (
    SELECT q.tk, q.kernel_seq, st.step_id, st.step_name, st.phase
    FROM kq q ASOF JOIN (SELECT hash(trace_id, pid) AS step_pk, * FROM int_steps WHERE pid IS NOT NULL) st
      ON q.step_pk = st.step_pk AND q.step_level = st.step_level AND q.host_ts_ns >= st.step_ts_ns
    WHERE q.host_ts_ns < st.step_end_ns
    QUALIFY row_number() OVER (PARTITION BY q.tk, q.kernel_seq ORDER BY st.step_level DESC) = 1
),
base0 AS (
    SELECT
        k.*,
        CASE
            WHEN lt.trace_id IS NOT NULL THEN CAST(k.has_lib AS INTEGER)
            ELSE coalesce(nr.i_lib, 0)
        END AS i_lib,
        CASE WHEN lt.trace_id IS NOT NULL THEN 'library_api_range' ELSE coalesce(nr.rule, 'no_rule_matched') END
            AS i_lib_rule,
        CASE WHEN k.is_linked THEN CASE WHEN k.has_py THEN k.op_ts_ns - k.py_ts_ns ELSE 0 END END AS t_py_ns,
        CASE WHEN k.is_linked THEN k.launch_ts_ns - k.op_ts_ns END AS t_dispatch_ns,
        k.kernel_ts_ns - k.launch_ts_ns AS t_launch_obs_ns,
        k.is_linked AND k.is_charged_launch AS is_charged
    FROM k
    LEFT JOIN lib_traces lt ON lt.trace_id = k.trace_id
    LEFT JOIN name_rule nr ON nr.kernel_name = k.kernel_name
),
base AS (
    SELECT
        trace_id,
        CAST(quantile_cont(t_dispatch_ns, 0.5) FILTER (WHERE is_charged AND i_lib = 0 AND t_dispatch_ns > 100)
             AS BIGINT) AS t_dispatch_base_ns
    FROM base0 GROUP BY trace_id
),
-- t_dispatch_blocked_ns (METHOD.md section 2, ours): the part of [op start, launch start) the launching thread spent
-- inside other launch or sync calls.  Such calls do not overlap on a thread, so a running sum of their durations
-- per thread gives it with two ASOF lookups: the calls begun before the launch minus those begun before the op,
-- each corrected for the one call that straddles the window's edge.
calls AS (
    SELECT thread_key, ts_ns, end_ns,
           sum(dur_ns) OVER (PARTITION BY thread_key ORDER BY ts_ns, event_id ROWS UNBOUNDED PRECEDING) AS cum_ns
    FROM stg_events WHERE host_call_class IN ('launch', 'sync') AND dur_ns > 0
),
bq AS (
    SELECT tk, kernel_seq, hash(trace_id, pid, launch_tid) AS thread_key, op_ts_ns, launch_ts_ns
    FROM base0 WHERE is_charged
),
-- the calls begun before the launch, then (on those rows) the calls begun before the op
b_at_launch AS (
    SELECT q.tk, q.kernel_seq, q.thread_key, q.op_ts_ns,
           c.cum_ns - greatest(0, c.end_ns - q.launch_ts_ns) AS cum_launch_ns
    FROM bq q ASOF JOIN calls c ON q.thread_key = c.thread_key AND q.launch_ts_ns > c.ts_ns
),
blocked AS (
    SELECT q.tk, q.kernel_seq,
           CAST(q.cum_launch_ns - coalesce(c.cum_ns - greatest(0, c.end_ns - q.op_ts_ns), 0) AS BIGINT)
               AS t_dispatch_blocked_ns
    FROM b_at_launch q ASOF LEFT JOIN calls c ON q.thread_key = c.thread_key AND q.op_ts_ns > c.ts_ns
),
x AS (
    SELECT b0.*, b.t_dispatch_base_ns, f.t_sys_ns, bk.t_dispatch_blocked_ns
    FROM base0 b0 JOIN base b USING (trace_id) JOIN trace_launch_floor f USING (trace_id)
    LEFT JOIN blocked bk ON bk.tk = b0.tk AND bk.kernel_seq = b0.kernel_seq
)
SELECT
    x.trace_id,
    x.kernel_seq,
    x.pid,
    x.device_id,
    x.kernel_name,
    x.op_name,
    x.op_namespace,
    ks.step_id,
    ks.step_name,
    ks.phase,
    x.kernel_ts_ns,
    x.kernel_end_ns,
    x.kernel_dur_ns,
    x.launch_ts_ns,
    x.is_linked,
    x.is_charged,
    x.is_graph_launch,
    x.has_launch,
    x.has_py,
    x.i_lib,
    x.i_lib_rule,
    x.t_py_ns,
    x.t_dispatch_ns,
    x.t_launch_obs_ns,
    x.t_dispatch_base_ns,
    x.t_sys_ns,
    CASE WHEN NOT x.is_linked THEN NULL WHEN NOT x.is_charged THEN 0 ELSE coalesce(x.t_dispatch_blocked_ns, 0) END
        AS t_dispatch_blocked_ns,
    CASE
        WHEN NOT x.is_linked THEN NULL
        WHEN NOT x.is_charged THEN 0
        WHEN x.i_lib = 1 THEN x.t_py_ns + coalesce(x.t_dispatch_base_ns, x.t_dispatch_ns)
        ELSE x.t_py_ns + x.t_dispatch_ns
    END AS delta_ft_ns,
    CASE
        WHEN NOT x.is_linked THEN NULL
        WHEN NOT x.is_charged THEN 0
        WHEN x.i_lib = 1 THEN greatest(0, x.t_dispatch_ns - coalesce(x.t_dispatch_base_ns, x.t_dispatch_ns))
        ELSE 0
    END AS delta_ct_ns,
    CASE WHEN NOT x.is_linked THEN NULL WHEN NOT x.is_charged THEN 0 ELSE x.t_sys_ns END AS delta_kt_ns,
    CASE
        WHEN NOT x.is_linked THEN NULL
        WHEN NOT x.is_charged THEN 0
        ELSE greatest(0, x.t_launch_obs_ns - x.t_sys_ns)
    END AS delta_kt_excess_ns
FROM x
LEFT JOIN kstep ks ON ks.tk = x.tk AND ks.kernel_seq = x.kernel_seq
