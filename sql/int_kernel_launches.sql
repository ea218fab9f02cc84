-- table: int_kernel_launches
-- grain: one row per kernel invocation (kind = 'kernel') of the run's traces
-- reads: stg_events
-- materialize: temp
-- description: Each kernel with the launch call that fed it (same process and correlation id; the graph launch, else the runtime call, else the driver call; METHOD.md section 1), the first step of int_kernel_links. A run-local table of its own rather than a step of that statement: DuckDB held this step's, int_kernel_ext_ops' and int_launch_enclosing's results in one statement's memory, which ran out under a 6GB memory_limit at 10 M kernels (ours, an engine choice; the rows are those of the one statement).
-- column: event_id: stg_events.event_id of the kernel
-- column: trace_key: stg_events.trace_key of the kernel's trace
-- column: ts_ns: kernel start (ns)
-- column: dur_ns: kernel duration (ns)
-- column: end_ns: kernel end (ns)
-- column: proc_key: stg_events.proc_key of the kernel's process
-- column: device_id: GPU index
-- column: stream_id: GPU stream
-- column: correlation_id: launch correlation id of the kernel
-- column: external_id: Kineto External id of the kernel
-- column: graph_id: CUDA graph id (Nsight) of a graph-launched kernel
-- column: l_event_id: stg_events.event_id of the launch call linked; NULL when none (no launch call, or several share the kernel's process and correlation id)
-- column: launch_thread_key: stg_events.thread_key of the launch call
-- column: launch_ts_ns: launch call start (ns)
-- column: launch_dur_ns: launch call duration (ns)
-- column: launch_name: launch call name
-- column: launch_kind: launch call kind (runtime_api, driver_api, graph_launch)
-- column: launch_tid: thread of the launch call
-- column: shared_correlation_launches: launch calls of the kernel's process that carry its correlation id, of the kind the link would take; NULL when none (launches)
WITH
k AS (
    SELECT event_id, trace_key, ts_ns, dur_ns, end_ns, proc_key, device_id, stream_id,
           correlation_id, external_id, graph_id
    FROM stg_events WHERE kind = 'kernel'
),
launch_candidates AS (
    SELECT event_id, proc_key, thread_key, correlation_id, kind, ts_ns, dur_ns, name, tid,
           CASE kind WHEN 'graph_launch' THEN 0 WHEN 'runtime_api' THEN 1 ELSE 2 END AS link_rank
    FROM stg_events
    WHERE kind IN ('runtime_api', 'driver_api', 'graph_launch') AND correlation_id IS NOT NULL
      AND (proc_key, correlation_id) IN (SELECT proc_key, correlation_id FROM k)
),
-- one launch per (process, correlation id): the graph launch, else the runtime call, else the driver call; two or
-- more of that kind under one id (a corrupt or merged trace) leave the id's kernels unlinked, counted, never tied
-- to the first of them (issue 30: the second launch's kernel got the first's queueing time)
l_rank AS (
    SELECT proc_key, correlation_id, min(link_rank) AS link_rank FROM launch_candidates GROUP BY ALL
),
l_pick AS (
    SELECT c.proc_key, c.correlation_id, arg_min(c.event_id, (c.ts_ns, c.event_id)) AS event_id,
           count(*) AS shared_correlation_launches
    FROM launch_candidates c SEMI JOIN l_rank r USING (proc_key, correlation_id, link_rank)
    GROUP BY ALL
),
l AS (
    SELECT c.* FROM launch_candidates c
    SEMI JOIN (SELECT event_id FROM l_pick WHERE shared_correlation_launches = 1) p ON c.event_id = p.event_id
),
-- the launch call's name, kind and thread ride along from l (a narrow join side) rather than being looked up in
-- stg_events at the end, where DuckDB built that join's hash table from the wide kernel rows (~0.9 CPU-s of 5 at
-- 292 k kernels)
kl AS (
    SELECT
        k.*,
        l.event_id AS l_event_id,
        l.thread_key AS launch_thread_key, l.ts_ns AS launch_ts_ns, l.dur_ns AS launch_dur_ns,
        l.name AS launch_name, l.kind AS launch_kind, l.tid AS launch_tid,
        p.shared_correlation_launches
    FROM k LEFT JOIN l ON k.proc_key = l.proc_key AND k.correlation_id = l.correlation_id
    LEFT JOIN l_pick p ON k.proc_key = p.proc_key AND k.correlation_id = p.correlation_id
)
SELECT * FROM kl
