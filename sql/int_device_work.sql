-- table: int_device_work
-- grain: one row per device event of a GPU (kernel, memcpy, memset) of the traces being analysed
-- reads: stg_events
-- materialize: temp
-- description: Device work with its class (ours; like HTA's temporal breakdown, docs/method.md section 3): 'communication' for a kernel whose name is a collective library's (NCCL or RCCL: the name contains nccl or rccl, or a collective's name such as all_reduce, allgather, reduce_scatter, alltoall, cross_device_reduce), 'memcpy' and 'memset' for copies and sets, 'compute' for every other kernel. The one place the communication predicate is written; gpu_time_breakdown reads it. A run-local table, never kept in the warehouse.
-- column: trace_id: trace key
-- column: device_id: GPU index
-- column: stream_id: GPU stream
-- column: kind: 'kernel', 'memcpy' or 'memset'
-- column: name: event name
-- column: ts_ns: start (ns)
-- column: end_ns: end (ns)
-- column: work_class: 'communication', 'compute', 'memcpy' or 'memset'
WITH
dev AS (
    SELECT trace_id, device_id, stream_id, kind, name, ts_ns, end_ns
    FROM stg_events
    WHERE kind IN ('kernel', 'memcpy', 'memset') AND device_id IS NOT NULL
),
-- the predicate runs once per distinct kernel name (a trace repeats a few thousand names over its kernels)
comm_names AS (
    SELECT name,
           regexp_matches(lower(coalesce(name, '')),
                          'nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce')
               AS is_comm
    FROM (SELECT DISTINCT name FROM dev WHERE kind = 'kernel')
)
SELECT
    d.trace_id,
    d.device_id,
    d.stream_id,
    d.kind,
    d.name,
    d.ts_ns,
    d.end_ns,
    CASE
        WHEN d.kind IN ('memcpy', 'memset') THEN d.kind
        WHEN c.is_comm THEN 'communication'
        ELSE 'compute'
    END AS work_class
FROM dev d
LEFT JOIN comm_names c ON c.name = d.name AND d.kind = 'kernel'
