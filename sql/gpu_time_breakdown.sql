-- table: gpu_time_breakdown
-- grain: one row per GPU of a trace
-- reads: int_device_work, stg_catalogue, int_traces
-- description: Where each GPU's time goes, by work class (int_device_work: communication, compute, memcpy, memset), a temporal breakdown like HTA's (ours; docs/method.md section 3). Over the span from the GPU's first device event start to its last end, every instant is charged to one class in the order compute > communication > memory (memcpy or memset) > idle, so t_compute_ns + t_comm_exposed_ns + t_memory_exposed_ns + t_idle_ns = span_ns, and t_idle_ns equals device_busy.idle_ns. The per-class busy times count each class's own merged intervals (a class overlapping another is counted in both). Communication/computation overlap: the time both a communication and a compute kernel run, over the communication busy time.
-- column: trace_id: trace key
-- column: device_id: GPU index
-- column: rank: distributed rank of the trace's process (Kineto distributedInfo.rank); NULL when the trace does not say
-- column: first_start_ns: first device event start (ns)
-- column: last_end_ns: last device event end (ns)
-- column: span_ns: last_end_ns - first_start_ns (ns)
-- column: kernels: kernels on the GPU (kernels)
-- column: comm_kernels: communication kernels on the GPU (kernels)
-- column: t_compute_ns: time a compute kernel runs (ns)
-- column: t_comm_exposed_ns: time a communication kernel runs and no compute kernel does (ns)
-- column: t_memory_exposed_ns: time a memcpy or memset runs and no kernel does (ns)
-- column: t_idle_ns: time nothing runs (ns)
-- column: compute_busy_ns: merged busy time of compute kernels (ns)
-- column: comm_busy_ns: merged busy time of communication kernels (ns)
-- column: memcpy_busy_ns: merged busy time of memcpys (ns)
-- column: memset_busy_ns: merged busy time of memsets (ns)
-- column: comm_compute_overlap_ns: time a communication kernel and a compute kernel both run (ns)
-- column: comm_overlap_fraction: comm_compute_overlap_ns / comm_busy_ns; NULL without communication (fraction)
-- column: compute_fraction: t_compute_ns / span_ns (fraction)
-- column: comm_exposed_fraction: t_comm_exposed_ns / span_ns (fraction)
-- column: memory_exposed_fraction: t_memory_exposed_ns / span_ns (fraction)
-- column: idle_fraction: t_idle_ns / span_ns (fraction)
WITH
-- a trace's rows carry its run-local number (int_traces) through the sweep instead of the trace id text
traces AS (SELECT trace_id, trace_key AS tk FROM int_traces),
work AS (
    SELECT t.tk, w.device_id, w.kind, w.ts_ns, w.end_ns, w.work_class
    FROM int_device_work w JOIN traces t USING (trace_id)
),
-- one +1 at each start and one -1 at each end, per class; a sweep over the GPU's change points
pts AS (
    SELECT tk, device_id, ts_ns AS t, work_class, 1 AS d FROM work
    UNION ALL
    SELECT tk, device_id, end_ns AS t, work_class, -1 AS d FROM work
),
-- after each change point: how many events of each class run, and for how long until the next change point.  The
-- running sums take a time's peers (RANGE), so points at one time agree and all but one get seg_ns 0
seg AS (
    SELECT tk, device_id, t,
           sum(CASE WHEN work_class = 'compute' THEN d ELSE 0 END) OVER w AS n_compute,
           sum(CASE WHEN work_class = 'communication' THEN d ELSE 0 END) OVER w AS n_comm,
           sum(CASE WHEN work_class = 'memcpy' THEN d ELSE 0 END) OVER w AS n_memcpy,
           sum(CASE WHEN work_class = 'memset' THEN d ELSE 0 END) OVER w AS n_memset,
           coalesce(lead(t) OVER (PARTITION BY tk, device_id ORDER BY t), t) - t AS seg_ns
    FROM pts
    WINDOW w AS (PARTITION BY tk, device_id ORDER BY t RANGE UNBOUNDED PRECEDING)
),
agg AS (
    SELECT tk, device_id, min(t) AS first_start_ns, max(t) AS last_end_ns,
           coalesce(sum(seg_ns) FILTER (WHERE n_compute > 0), 0) AS t_compute_ns,
           coalesce(sum(seg_ns) FILTER (WHERE n_compute = 0 AND n_comm > 0), 0) AS t_comm_exposed_ns,
           coalesce(sum(seg_ns) FILTER (WHERE n_compute = 0 AND n_comm = 0 AND n_memcpy + n_memset > 0), 0)
               AS t_memory_exposed_ns,
           coalesce(sum(seg_ns) FILTER (WHERE n_compute + n_comm + n_memcpy + n_memset = 0), 0) AS t_idle_ns,
           coalesce(sum(seg_ns) FILTER (WHERE n_compute > 0), 0) AS compute_busy_ns,
           coalesce(sum(seg_ns) FILTER (WHERE n_comm > 0), 0) AS comm_busy_ns,
           coalesce(sum(seg_ns) FILTER (WHERE n_memcpy > 0), 0) AS memcpy_busy_ns,
           coalesce(sum(seg_ns) FILTER (WHERE n_memset > 0), 0) AS memset_busy_ns,
           coalesce(sum(seg_ns) FILTER (WHERE n_comm > 0 AND n_compute > 0), 0) AS comm_compute_overlap_ns
    FROM seg GROUP BY tk, device_id
),
cnt AS (
    SELECT tk, device_id, count(*) FILTER (WHERE kind = 'kernel') AS kernels,
           count(*) FILTER (WHERE work_class = 'communication') AS comm_kernels
    FROM work GROUP BY tk, device_id
)
SELECT
    tr.trace_id,
    a.device_id,
    TRY_CAST(json_extract_string(c.metadata_json, '$.distributedInfo.rank') AS INTEGER) AS rank,
    a.first_start_ns,
    a.last_end_ns,
    a.last_end_ns - a.first_start_ns AS span_ns,
    n.kernels,
    n.comm_kernels,
    CAST(a.t_compute_ns AS BIGINT) AS t_compute_ns,
    CAST(a.t_comm_exposed_ns AS BIGINT) AS t_comm_exposed_ns,
    CAST(a.t_memory_exposed_ns AS BIGINT) AS t_memory_exposed_ns,
    CAST(a.t_idle_ns AS BIGINT) AS t_idle_ns,
    CAST(a.compute_busy_ns AS BIGINT) AS compute_busy_ns,
    CAST(a.comm_busy_ns AS BIGINT) AS comm_busy_ns,
    CAST(a.memcpy_busy_ns AS BIGINT) AS memcpy_busy_ns,
    CAST(a.memset_busy_ns AS BIGINT) AS memset_busy_ns,
    CAST(a.comm_compute_overlap_ns AS BIGINT) AS comm_compute_overlap_ns,
    a.comm_compute_overlap_ns / nullif(a.comm_busy_ns, 0) AS comm_overlap_fraction,
    a.t_compute_ns / nullif(a.last_end_ns - a.first_start_ns, 0) AS compute_fraction,
    a.t_comm_exposed_ns / nullif(a.last_end_ns - a.first_start_ns, 0) AS comm_exposed_fraction,
    a.t_memory_exposed_ns / nullif(a.last_end_ns - a.first_start_ns, 0) AS memory_exposed_fraction,
    a.t_idle_ns / nullif(a.last_end_ns - a.first_start_ns, 0) AS idle_fraction
FROM agg a
JOIN cnt n USING (tk, device_id)
JOIN traces tr USING (tk)
LEFT JOIN stg_catalogue c ON c.trace_id = tr.trace_id
