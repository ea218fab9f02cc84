"""What-if replay and critical path (docs/method.md, "What-if replay"; the model is ours).

From one analysed trace, build the dependency graph of its host threads and GPU streams, replay it under a
scenario (faster host, another launch floor, faster GPU, CUDA graphs for a phase or steps, fused kernel chains)
and report IL, HDBI, HDBI_wall, GPU idle and TKLQT per scope beside the trace's own values, plus the critical
path of each scope split into host (framework, library, launch) and device time.

The graph (all times int64 ns):

- host: each host thread is a chain of *segments*, the thread's wall time cut at every start and end of its traced
  host events (launch, library, framework, sync, other runtime calls; the gaps between events are kept as
  untraced host work), each labelled by its innermost event exactly as ``host_partition`` labels it. A segment
  ends at ``end(previous segment) + weight``; weights are the traced durations.
- launch: a device op (kernel, memcpy, memset) linked to its launch call (kernels: ``int_kernel_links``; copies and
  sets: the runtime call with their process and correlation id) becomes ready at the replayed start of the launch
  call + its launch latency; a graph launch feeds all of its kernels.
- stream order: each (device, stream) is a chain: an op starts at max(ready, end of what ran before it on the
  stream + a GPU-side gap).
- sync: a blocking call (``*Synchronize*``, synchronous ``cudaMemcpy``...) that returned after device work of its
  process ended inside the call waited for that work: it returns at max(its replayed start, the work's replayed
  end) + the wake-up time it showed (its end - the work's end).

Edge weights are the trace's own: for each device op the constraint that bound it in the trace (launch or stream,
whichever leaves the smaller slack) keeps its observed gap, the other gets its floor (launch: min(T_sys, observed);
stream: min(the stream's smallest non-negative gap, observed)); so the identity replay reproduces every start.

Replay is one ordered pass cut at the waiting syncs (the only edges from a GPU back to a host): between two such
syncs every chain is a cumulative sum (host) or a cumulative max (stream), done with numpy per block.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from taxbreak.engine import analysis, plan
from taxbreak.engine.analysis import publication
from taxbreak.engine.plan import quote_ident as _q
from taxbreak.ingest.lake import Lake
from taxbreak.store.query import has_relation

NEG = -(1 << 62)  # "no constraint" (an int64 far below every time)

# Host segment categories: the codes of host_partition.sql (1..7) and their names.
CAT_LAUNCH, CAT_LIBRARY, CAT_FRAMEWORK, CAT_SYNC, CAT_OTHER, CAT_UNTRACED, CAT_UNRESOLVED = 1, 2, 3, 4, 5, 6, 7
CAT_NAMES = {1: "launch", 2: "library", 3: "framework", 4: "sync", 5: "other_runtime", 6: "untraced", 7: "unresolved"}
DEV_KINDS = ("kernel", "memcpy", "memset")
# Host calls that block the calling thread until device work ends (ours): synchronize calls and the synchronous
# (non-Async) copies and sets of the CUDA/HIP runtime and driver APIs.
BLOCKING_CALL_RE = r"(?i)(synchronize|^(cuda|hip)memcpy(2d|3d)?(toarray|fromarray|tosymbol|fromsymbol)?$|" \
                   r"^(cuda|hip)memset$|^cumemcpy(htod|dtoh|dtod)?(_v2)?$)"


# --- scenarios ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    """One what-if: every field at its default is the identity replay."""

    name: str = "identity"
    host_speedup: float = 1.0  # every host duration / s (traced and untraced host work)
    t_sys_ns: int | None = None  # a new launch floor T_sys'; launch latencies scale by T_sys' / T_sys
    t_sys_scale: float = 1.0  # or scale the launch path by this factor (ignored when t_sys_ns is set)
    gpu_speedup: float = 1.0  # kernel durations / g
    cuda_graph: str | None = None  # a phase name ('decode'), 'all', or 'step:3,4': its launches become one per step
    graph_keep_framework: bool = True  # with cuda_graph: keep (True) or drop the framework/library host time
    graph_gap_ns: int | None = None  # with cuda_graph: GPU gap between graph kernels (default: the stream floor)
    fuse_top: int = 0  # fuse the top N fusion candidates (fusion_candidates.rank <= N)
    host_delay_ns: int = 0  # a fixed host delay added to each outermost framework op (after / s)
    framework_speedup: float = 1.0  # framework op / Python self time / f on top of / s (the verdict's levers)
    library_speedup: float = 1.0  # cuBLAS/cuDNN call self time / l on top of / s
    top_kernels: int = 0  # the N kernel names with the most total time ...
    top_kernels_speedup: float = 1.0  # ... run this much faster (on top of / g)

    def __post_init__(self) -> None:
        for f in ("host_speedup", "gpu_speedup", "t_sys_scale", "framework_speedup", "library_speedup",
                  "top_kernels_speedup"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"scenario {self.name!r}: {f} must be a positive number, not {v!r}")
        if self.t_sys_ns is not None and self.t_sys_ns < 0:
            raise ValueError(f"scenario {self.name!r}: t_sys_ns must be >= 0")
        if self.host_delay_ns < 0:
            raise ValueError(f"scenario {self.name!r}: host_delay_ns must be >= 0")
        if self.fuse_top < 0:
            raise ValueError(f"scenario {self.name!r}: fuse_top must be >= 0")
        if self.top_kernels < 0:
            raise ValueError(f"scenario {self.name!r}: top_kernels must be >= 0")
        if self.cuda_graph is not None and not re.fullmatch(r"all|[A-Za-z_]+|step:\d+(,\d+)*", self.cuda_graph):
            raise ValueError(f"scenario {self.name!r}: cuda_graph must be a phase name, 'all' or 'step:N[,M...]'")

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


SWEEP_SPEEDUPS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)


def default_scenarios() -> list[Scenario]:
    """The scenarios computed for every trace: the host-speed sweep (1x..4x), GPU 2x, graphs for decode,
    the top-5 fusion candidates."""
    out = [Scenario(name=f"host_x{s:g}", host_speedup=s) for s in SWEEP_SPEEDUPS]
    out[0] = replace(out[0], name="identity")
    out += [Scenario(name="gpu_x2", gpu_speedup=2.0), Scenario(name="cuda_graph_decode", cuda_graph="decode"),
            Scenario(name="fuse_top5", fuse_top=5)]
    return out + lever_scenarios()


def lever_scenarios() -> list[Scenario]:
    """The scenarios only the verdict's levers read (sql/whatif/levers.sql, docs/method.md "The verdict"): one host
    component at a time twice as fast, the launch path halved, the top three kernels twice as fast, every step
    as a CUDA graph. The other levers read the default scenarios host_x1.5, gpu_x2, cuda_graph_decode, fuse_top5."""
    return [Scenario(name="lever_framework_x2", framework_speedup=2.0),
            Scenario(name="lever_library_x2", library_speedup=2.0),
            Scenario(name="lever_launch_x0.5", t_sys_scale=0.5),
            Scenario(name="lever_top3_kernels_x2", top_kernels=3, top_kernels_speedup=2.0),
            Scenario(name="cuda_graph_all", cuda_graph="all")]


# --- the graph -------------------------------------------------------------------------------------------------------
@dataclass
class Graph:
    trace_id: str
    t_sys_ns: int
    # host segments, sorted by (thread, start)
    h_thread: np.ndarray
    h_ts: np.ndarray
    h_dur: np.ndarray
    h_cat: np.ndarray
    h_await: np.ndarray  # device op index a waiting sync waited for (on the segment ending the call), else -1
    h_wake: np.ndarray  # that sync's end - the op's end (ns)
    h_leaf_ops: np.ndarray  # outermost framework ops starting at the segment's start (ops)
    h_blocked: np.ndarray  # a launch segment that waited (not host work in HDBI_wall)
    thread_pid: list[str]
    thread_tid: list[str]
    thread_first: np.ndarray  # first segment index per thread
    # device ops, sorted by (stream chain, start)
    d_chain: np.ndarray
    d_kind: np.ndarray  # 0 kernel, 1 memcpy, 2 memset
    d_ts: np.ndarray
    d_dur: np.ndarray
    d_launch_seg: np.ndarray  # host segment starting at the launch call, else -1
    d_launch_id: np.ndarray  # launch call id (same for every kernel of one graph launch), else -1
    d_charged: np.ndarray  # first kernel of its launch (TKLQT sample, the launch's host cost)
    d_kernel_seq: np.ndarray  # int_kernel_links.kernel_seq for kernels, else -1
    d_lat_w: np.ndarray  # launch edge weight (ns)
    d_gap_w: np.ndarray  # stream edge weight (ns)
    d_lat_bound: np.ndarray  # the launch edge bound the op in the trace
    chain_gap_floor: np.ndarray  # per stream chain: smallest non-negative gap (ns)
    # scopes: kernel_seq -> step_id / phase (from kernel_taxbreak), steps, trace figures
    steps: list[dict[str, Any]] = field(default_factory=list)
    d_step: np.ndarray | None = None  # step_id per device op (-1 none)
    trace_own: dict[str, Any] = field(default_factory=dict)
    scope_own: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    il_start: tuple[int, int] | None = None  # (thread index or -1, orig ns)
    fusion_chains: list[list[str]] = field(default_factory=list)
    d_name_code: np.ndarray | None = None
    d_names: list[str] = field(default_factory=list)
    d_order_ts: np.ndarray | None = None  # launch order key (launch start else start)
    d_pid: np.ndarray | None = None
    d_tb_charged: np.ndarray | None = None  # kernel_taxbreak.is_charged (a linked launch: N of T_Orchestrate)
    d_linked: np.ndarray | None = None
    d_ft_ct: np.ndarray | None = None  # delta_ft_ns + delta_ct_ns of the kernel (ns)
    scope_cache: list[Any] | None = None
    d_phase: Any = None  # pyarrow array: kernel_taxbreak.phase per device op

    @property
    def n_host(self) -> int:
        return len(self.h_ts)

    @property
    def n_dev(self) -> int:
        return len(self.d_ts)


def _arr(tbl: pa.Table, col: str, dtype: Any = np.int64, fill: int = -1) -> np.ndarray:
    c = tbl.column(col)
    if c.null_count:
        c = c.fill_null(fill)
    return c.to_numpy().astype(dtype, copy=False)


# The host segments come from sql/int_host_segments.sql (the one place the host categories and the blocked-launch
# rule live, shared with host_partition); category 8 (a launch call that waited) is a launch segment flagged blocked.
CAT_LAUNCH_BLOCKED = 8
_SEGMENTS_SQL = """
SELECT dense_rank() OVER (ORDER BY pid, tid) - 1 AS thread, pid, tid, t, seg_ns,
       CASE WHEN category = 8 THEN 1 ELSE category END AS category, category = 8 AS blocked
FROM int_host_segments WHERE trace_id = $t
ORDER BY pid, tid, t
"""

_DEVICE_SQL = """
WITH
k AS (
    SELECT kind, name, ts_ns, dur_ns, pid, device_id, stream_id, correlation_id,
           CASE WHEN kind = 'kernel' THEN row_number() OVER (
               PARTITION BY kind = 'kernel' ORDER BY ts_ns, device_id, stream_id, correlation_id, file_row_number)
           END AS kernel_seq
    FROM _wi_ev_all WHERE kind IN ('kernel', 'memcpy', 'memset') AND dur_ns IS NOT NULL
),
-- copies and sets: their runtime call (same process and correlation id; the rule of int_kernel_links)
calls AS (
    SELECT pid, correlation_id, arg_min(tid, (CASE kind WHEN 'graph_launch' THEN 0 WHEN 'runtime_api' THEN 1 ELSE 2 END,
                                              ts_ns)) AS tid,
           min(ts_ns) AS ts_ns
    FROM _wi_ev WHERE kind IN ('runtime_api', 'driver_api', 'graph_launch') AND correlation_id IS NOT NULL
      AND (pid, correlation_id) IN (SELECT pid, correlation_id FROM k WHERE kind <> 'kernel')
    GROUP BY pid, correlation_id
)
SELECT
    k.kind, k.name, k.ts_ns, k.dur_ns, k.pid, coalesce(k.device_id, -1) AS device_id,
    coalesce(k.stream_id, -1) AS stream_id, k.kernel_seq,
    CASE WHEN k.kind = 'kernel' THEN l.launch_tid ELSE c.tid END AS launch_tid,
    CASE WHEN k.kind = 'kernel' THEN l.launch_ts_ns ELSE c.ts_ns END AS launch_ts_ns,
    CASE WHEN k.kind = 'kernel' THEN coalesce(l.is_charged_launch, false) ELSE c.ts_ns IS NOT NULL END AS charged,
    kt.step_id, kt.phase, coalesce(kt.is_linked, false) AS is_linked, coalesce(kt.is_charged, false) AS tb_charged,
    coalesce(kt.delta_ft_ns, 0) + coalesce(kt.delta_ct_ns, 0) AS ft_ct_ns
FROM k
LEFT JOIN int_kernel_links l ON k.kind = 'kernel' AND l.trace_id = $t AND l.kernel_seq = k.kernel_seq
LEFT JOIN kernel_taxbreak kt ON k.kind = 'kernel' AND kt.trace_id = $t AND kt.kernel_seq = k.kernel_seq
LEFT JOIN calls c ON k.kind <> 'kernel' AND c.pid = k.pid AND c.correlation_id = k.correlation_id
"""

_SYNC_SQL = """
SELECT pid, tid, ts_ns, ts_ns + dur_ns AS end_ns
FROM _wi_ev
WHERE kind IN ('runtime_api', 'driver_api') AND dur_ns > 0 AND regexp_matches(name, $re)
"""


def _events_source(lake_root: str | os.PathLike[str], trace_id: str, con: duckdb.DuckDBPyConnection) -> str:
    lake = Lake(lake_root)
    lake.register_filesystem(con)
    if not lake.has_events(trace_id):
        raise LookupError(f"{lake_root}: no events in the lake for trace {trace_id}")
    return str(lake.events_path(trace_id))


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
    cur = con.execute(sql, params)
    row = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], row, strict=True)) if row is not None else None


def build_graph(con: duckdb.DuckDBPyConnection, lake_root: str | os.PathLike[str], trace_id: str) -> Graph:
    """The dependency graph of one analysed trace: ``con`` sees its analysis tables (int_kernel_links,
    kernel_taxbreak, int_steps, trace_launch_floor, skip_by_trace; fusion_candidates, host_partition when there);
    its events are read from the lake."""
    for t in REQUIRED_TABLES:
        if not has_relation(con, t):
            raise LookupError(f"table {t} is missing: run `taxbreak analyze` for trace {trace_id[:16]} first")
    floor = _one(con, "SELECT t_sys_ns FROM trace_launch_floor WHERE trace_id = $t", {"t": trace_id})
    if floor is None:
        raise LookupError(f"trace {trace_id[:16]} is not analysed: run `taxbreak analyze` first")
    src = _events_source(lake_root, trace_id, con)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _wi_ev_all AS SELECT kind, name, ts_ns, dur_ns, pid, tid, device_id, stream_id, "
        "correlation_id, file_row_number FROM read_parquet($f, file_row_number = true) "
        "WHERE kind NOT IN ('metadata', 'flow', 'instant', 'nvtx_mark', 'other')", {"f": src})
    con.execute("CREATE OR REPLACE TEMP VIEW _wi_ev AS SELECT * FROM _wi_ev_all")
    try:
        seg, first_op = _host_segments(lake_root, trace_id)
        dev = con.sql(_DEVICE_SQL + " ORDER BY device_id, stream_id, ts_ns, kernel_seq NULLS LAST",
                      params={"t": trace_id}).to_arrow_table()
        syn = con.sql(_SYNC_SQL, params={"re": BLOCKING_CALL_RE}).to_arrow_table()
        ops = con.sql("SELECT pid, tid, ts_ns, ts_ns + dur_ns AS end_ns FROM _wi_ev WHERE kind = 'framework_op' "
                      "AND dur_ns > 0 ORDER BY pid, tid, ts_ns, end_ns DESC").to_arrow_table()
        g = _assemble(trace_id, int(floor["t_sys_ns"]), seg, dev, syn, ops)
        _attach_scopes(con, g, first_op)
        if has_relation(con, "fusion_candidates"):
            rows = con.execute("SELECT chain FROM fusion_candidates WHERE trace_id = $t AND is_listed ORDER BY rank",
                               {"t": trace_id}).fetchall()
            g.fusion_chains = [list(r[0]) for r in rows]
    finally:
        con.execute("DROP VIEW IF EXISTS _wi_ev")
        con.execute("DROP TABLE IF EXISTS _wi_ev_all")
    return g


def _host_segments(lake_root: str | os.PathLike[str], trace_id: str) -> tuple[pa.Table, tuple | None]:
    """The trace's host segments (sql/int_host_segments.sql) and its first dispatcher op (pid, tid, ts_ns), computed
    by the analysis itself on a private in-memory connection, so the replay applies the analysis' rules."""

    mcon = analysis.connect(None)
    try:
        analysis.materialize_table(mcon, "int_host_segments", [trace_id], lake_root)
        seg = mcon.sql(_SEGMENTS_SQL, params={"t": trace_id}).to_arrow_table()
        rows = mcon.execute("SELECT pid, tid, ts_ns FROM stg_events WHERE is_dispatcher_op ORDER BY ts_ns LIMIT 1"
                            ).fetchall()
    finally:
        mcon.close()
    return seg, (rows[0] if rows else None)


def _assemble(trace_id: str, t_sys: int, seg: pa.Table, dev: pa.Table, syn: pa.Table, ops: pa.Table) -> Graph:
    # host
    h_thread = _arr(seg, "thread")
    h_ts = _arr(seg, "t")
    h_dur = _arr(seg, "seg_ns")
    h_cat = _arr(seg, "category", np.int8)
    pids = seg.column("pid").to_pylist()
    tids = seg.column("tid").to_pylist()
    n_threads = int(h_thread.max()) + 1 if len(h_thread) else 0
    thread_first = np.searchsorted(h_thread, np.arange(n_threads + 1))
    thread_pid = [pids[i] for i in thread_first[:-1]]
    thread_tid = [tids[i] for i in thread_first[:-1]]
    tkey = {(p, t): i for i, (p, t) in enumerate(zip(thread_pid, thread_tid, strict=True))}

    def seg_at(threads: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Index of the segment of each (thread, time) that starts at or before it (-1 outside the thread)."""
        out = np.full(len(ts), -1, dtype=np.int64)
        ok = threads >= 0
        if not ok.any() or not len(h_ts):
            return out
        # one searchsorted over (thread, t) keys: thread * span + t, span larger than any time range
        span = int(max(h_ts.max(), ts[ok].max()) - min(h_ts.min(), ts[ok].min())) + 2
        base = int(min(h_ts.min(), ts[ok].min()))
        key = h_thread * span + (h_ts - base)
        q = threads[ok] * span + (ts[ok] - base)
        idx = np.searchsorted(key, q, side="right") - 1
        good = (idx >= 0) & (h_thread[np.clip(idx, 0, None)] == threads[ok])
        out[np.flatnonzero(ok)[good]] = idx[good]
        return out

    # device ops, sorted by (device, stream, start)
    n = dev.num_rows
    kinds = pc.index_in(dev.column("kind"), pa.array(DEV_KINDS)).to_numpy(zero_copy_only=False).astype(np.int8)
    d_ts = _arr(dev, "ts_ns")
    d_dur = _arr(dev, "dur_ns")
    devid = _arr(dev, "device_id")
    strm = _arr(dev, "stream_id")
    pid_codes_all = pc.index_in(dev.column("pid"), pa.array(sorted(set(thread_pid) | set(
        dev.column("pid").unique().to_pylist()), key=str)))
    d_pid = pid_codes_all.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    chain_key = np.stack([devid, strm], axis=1) if n else np.zeros((0, 2), dtype=np.int64)
    if n:
        _, d_chain = np.unique(chain_key, axis=0, return_inverse=True)
        d_chain = d_chain.reshape(-1).astype(np.int64)
    else:
        d_chain = np.zeros(0, dtype=np.int64)
    thread_keys = pa.array([f"{p}\x00{t}" for p, t in zip(thread_pid, thread_tid, strict=True)], pa.string())
    dkey = pc.binary_join_element_wise(dev.column("pid").cast(pa.string()),
                                       dev.column("launch_tid").cast(pa.string()), "\x00")
    l_thread = pc.index_in(dkey, thread_keys).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    l_ts = _arr(dev, "launch_ts_ns", fill=0)
    has_l = dev.column("launch_ts_ns").is_valid().to_numpy(zero_copy_only=False).astype(bool)
    l_thread[~has_l] = -1
    d_launch_seg = seg_at(l_thread, l_ts)
    # the launch must start a segment (a launch call start is a segment boundary); else no launch edge
    bad = (d_launch_seg >= 0) & (h_ts[np.clip(d_launch_seg, 0, None)] != l_ts) if len(h_ts) else d_launch_seg >= 0
    d_launch_seg[bad] = -1
    # launch ids: one per (thread, launch start)
    d_launch_id = np.where(d_launch_seg >= 0, d_launch_seg, -1)
    d_charged = _arr(dev, "charged", bool, fill=0) & (d_launch_seg >= 0)
    d_kernel_seq = _arr(dev, "kernel_seq")
    d_step = _arr(dev, "step_id")

    # observed gaps and the binding edge of every op
    d_end = d_ts + d_dur
    prev_max = np.full(n, NEG, dtype=np.int64)
    chain_first = np.r_[True, d_chain[1:] != d_chain[:-1]] if n else np.zeros(0, dtype=bool)
    if n:
        # running max of ends per chain (exclusive): segmented max-accumulate with a per-chain offset
        big = np.int64(int(d_end.max() - min(d_ts.min(), 0)) + 2)
        shifted = d_end - d_ts.min() + d_chain * big
        runmax = np.maximum.accumulate(shifted) - d_chain * big + d_ts.min()
        prev_max[1:] = runmax[:-1]
        prev_max[chain_first] = NEG
    gap_obs = np.where(prev_max > NEG, d_ts - prev_max, 0)
    n_chains = int(d_chain.max()) + 1 if n else 0
    chain_gap_floor = np.zeros(n_chains, dtype=np.int64)
    if n:
        valid = (prev_max > NEG) & (gap_obs >= 0)
        floor_big = np.full(n_chains, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(floor_big, d_chain[valid], gap_obs[valid])
        chain_gap_floor = np.where(floor_big == np.iinfo(np.int64).max, 0, floor_big)
    lat_obs = np.where(d_launch_seg >= 0, d_ts - l_ts, 0)
    lat_floor = np.minimum(t_sys, np.maximum(lat_obs, 0))
    lat_floor = np.where(lat_obs < 0, lat_obs, lat_floor)
    gap_floor = np.minimum(chain_gap_floor[d_chain] if n else np.zeros(0, np.int64), gap_obs)
    a = np.where(d_launch_seg >= 0, l_ts + lat_floor, NEG)
    b = np.where(prev_max > NEG, prev_max + gap_floor, NEG)
    lat_bound = (d_launch_seg >= 0) & (a >= b)
    d_lat_w = np.where(lat_bound, lat_obs, lat_floor)
    d_gap_w = np.where(lat_bound | (prev_max == NEG), gap_floor, gap_obs)

    # waiting syncs: the device op of the process that ended last inside (start, end] of the call
    h_await = np.full(len(h_ts), -1, dtype=np.int64)
    h_wake = np.zeros(len(h_ts), dtype=np.int64)
    if syn.num_rows and n and len(h_ts):
        s_thread = np.array([tkey.get((p, t), -1) for p, t in zip(syn.column("pid").to_pylist(),
                                                                    syn.column("tid").to_pylist(), strict=True)],
                            dtype=np.int64)
        s_ts, s_end = _arr(syn, "ts_ns"), _arr(syn, "end_ns")
        pid_list = pa.array(sorted(set(dev.column("pid").unique().to_pylist()) | set(
            syn.column("pid").unique().to_pylist()), key=str))
        dp = pc.index_in(dev.column("pid"), pid_list).to_numpy(zero_copy_only=False).astype(np.int64)
        sp = pc.index_in(syn.column("pid"), pid_list).to_numpy(zero_copy_only=False).astype(np.int64)
        # ops sorted by (pid, end, start < end): the latest end <= the call's end, started before it
        span = int(max(d_end.max(), s_end.max()) - min(d_ts.min(), s_ts.min())) + 2
        base = int(min(d_ts.min(), s_ts.min()))
        okey = dp * span + (d_end - base)
        order = np.argsort(okey, kind="stable")
        q = sp * span + (s_end - base)
        pos = np.searchsorted(okey[order], q, side="right") - 1
        cand = order[np.clip(pos, 0, None)]
        waited = (pos >= 0) & (dp[cand] == sp) & (d_end[cand] > s_ts) & (d_ts[cand] < s_end) & (s_thread >= 0)
        # the segment that ends the call
        last_seg = seg_at(np.where(waited, s_thread, -1), s_end - 1)
        ok = waited & (last_seg >= 0)
        ok &= (h_ts[np.clip(last_seg, 0, None)] + h_dur[np.clip(last_seg, 0, None)]) == s_end
        h_await[last_seg[ok]] = cand[ok]
        h_wake[last_seg[ok]] = s_end[ok] - d_end[cand[ok]]

    # launch calls that waited (§3's rule, applied in sql/int_host_segments.sql) are not host work for HDBI_wall
    h_blocked = seg.column("blocked").to_numpy(zero_copy_only=False).astype(bool)
    # outermost framework ops (inside no other framework op on their thread: the ops Python called), counted at
    # their start segment
    h_leaf = np.zeros(len(h_ts), dtype=np.int64)
    if ops.num_rows and len(h_ts):
        okey = pc.binary_join_element_wise(ops.column("pid").cast(pa.string()), ops.column("tid").cast(pa.string()),
                                           "\x00")
        o_thread = pc.index_in(okey, thread_keys).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        o_ts, o_end = _arr(ops, "ts_ns"), _arr(ops, "end_ns")
        # ops are sorted by (thread, start, end desc): an op is outermost when it starts at or after the latest end
        # of the earlier ops of its thread (segmented running max with a per-thread offset)
        o_key = pc.binary_join_element_wise(ops.column("pid").cast(pa.string()), ops.column("tid").cast(pa.string()),
                                            "\x00").combine_chunks().dictionary_encode().indices.to_numpy(
                                                zero_copy_only=False).astype(np.int64)
        big = int(o_end.max() - o_ts.min()) + 2
        run = np.maximum.accumulate((o_end - o_ts.min()) + o_key.astype(np.int64) * big) - o_key * big + o_ts.min()
        prev = np.r_[np.iinfo(np.int64).min, run[:-1]]
        first = np.r_[True, o_key[1:] != o_key[:-1]]
        outer = first | (o_ts >= prev)
        at = seg_at(np.where(outer, o_thread, -1), o_ts)
        at = at[at >= 0]
        np.add.at(h_leaf, at, 1)
    enc = dev.column("name").combine_chunks().dictionary_encode() if n else None
    code = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64) if n else np.zeros(0, np.int64)
    uniq = enc.dictionary.to_pylist() if n else []
    order_ts = np.where(has_l, l_ts, d_ts)
    return Graph(
        trace_id=trace_id, t_sys_ns=t_sys, h_thread=h_thread, h_ts=h_ts, h_dur=h_dur, h_cat=h_cat, h_await=h_await,
        h_wake=h_wake, h_leaf_ops=h_leaf, h_blocked=h_blocked, thread_pid=thread_pid, thread_tid=thread_tid,
        thread_first=thread_first,
        d_chain=d_chain,
        d_kind=kinds, d_ts=d_ts, d_dur=d_dur, d_launch_seg=d_launch_seg, d_launch_id=d_launch_id,
        d_charged=d_charged, d_kernel_seq=d_kernel_seq, d_lat_w=d_lat_w, d_gap_w=d_gap_w, d_lat_bound=lat_bound,
        chain_gap_floor=chain_gap_floor, d_step=d_step, d_name_code=code, d_names=list(uniq),
        d_order_ts=order_ts, d_pid=d_pid,
        steps=[], trace_own={}, scope_own={}, d_tb_charged=_arr(dev, "tb_charged", bool, fill=0),
        d_linked=_arr(dev, "is_linked", bool, fill=0), d_ft_ct=_arr(dev, "ft_ct_ns", fill=0),
        d_phase=dev.column("phase"),
    )


def _attach_scopes(con: duckdb.DuckDBPyConnection, g: Graph, first_op: tuple | None = None) -> None:
    t = {"t": g.trace_id}
    cur = con.execute("SELECT step_id, step_name, phase, pid, tid, step_ts_ns, step_end_ns FROM int_steps "
                      "WHERE trace_id = $t ORDER BY step_id", t)
    cols = [d[0] for d in cur.description]
    g.steps = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    own = _one(con, "SELECT * FROM skip_by_trace WHERE trace_id = $t", t) or {}
    g.trace_own = own
    tkey = {(p, tid): i for i, (p, tid) in enumerate(zip(g.thread_pid, g.thread_tid, strict=True))}
    if own.get("il_start_basis") == "framework_op":
        row = first_op  # the first dispatcher op (stg_events.is_dispatcher_op), where skip_by_trace starts IL
        if row is not None:
            g.il_start = (tkey.get((row[0], row[1]), -1), int(row[2]))
    elif own.get("il_start_basis") == "launch_call":  # the first kernel launch (skip_by_trace's rule)
        segs = g.d_launch_seg[(g.d_kind == 0) & (g.d_launch_seg >= 0)]
        if len(segs):
            first = segs[np.argmin(g.h_ts[segs])]
            g.il_start = (int(g.h_thread[first]), int(g.h_ts[first]))
    if g.il_start is None and own.get("il_start_ns") is not None:
        g.il_start = (-1, int(own["il_start_ns"]))
    if has_relation(con, "taxbreak_by_scope"):
        cols = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = "
                                          "'taxbreak_by_scope'").fetchall()}
        wall = "hdbi_wall" if "hdbi_wall" in cols else "NULL"
        cur = con.execute(f"SELECT scope_kind, scope_key, hdbi, {wall} FROM taxbreak_by_scope "
                          "WHERE trace_id = $t AND scope_kind IN ('trace', 'step', 'phase')", t)
        for kind, key, hdbi, hdbi_wall in cur.fetchall():
            g.scope_own[(kind, "trace" if kind == "trace" else key)] = {"hdbi": hdbi, "hdbi_wall": hdbi_wall}


# --- replay ----------------------------------------------------------------------------------------------------------
@dataclass
class Times:
    """One replay's times: host segment ends and starts, device op starts and ends (ns), and the inputs used."""

    h_start: np.ndarray
    h_end: np.ndarray
    d_start: np.ndarray
    d_end: np.ndarray
    d_mprev: np.ndarray  # end of the stream's earlier work when the op became eligible (NEG: none)
    d_ready: np.ndarray  # launch-edge ready time (NEG: none)
    h_w: np.ndarray
    h_wake_w: np.ndarray
    d_dur: np.ndarray
    d_lat_w: np.ndarray
    d_gap_w: np.ndarray
    d_launch_seg: np.ndarray
    d_is_kernel: np.ndarray
    t_sys_eff_ns: float
    n_launch_removed: dict[int, int] = field(default_factory=dict)  # per step id (-1: no step): launches removed
    d_ft_ct: np.ndarray | None = None
    d_tb_charged: np.ndarray | None = None
    d_charged: np.ndarray | None = None  # the op carries its launch's TKLQT sample in this scenario
    wall_cs: np.ndarray | None = None  # prefix sums of launch + library + framework weights (figures' cache)


def _graph_groups(g: Graph, sc: Scenario) -> np.ndarray:
    """Per device op, the CUDA-graph group it joins in this scenario (a step id; -2 none)."""
    grp = np.full(g.n_dev, -2, dtype=np.int64)
    if not sc.cuda_graph:
        return grp
    kern = (g.d_kind == 0) & (g.d_launch_seg >= 0)
    if sc.cuda_graph == "all":
        sel = kern
    elif sc.cuda_graph.startswith("step:"):
        ids = [int(x) for x in sc.cuda_graph[5:].split(",")]
        sel = kern & np.isin(g.d_step, ids)
    else:
        ph = pc.equal(g.d_phase, sc.cuda_graph).fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
        sel = kern & ph
    grp[sel] = g.d_step[sel]  # -1: kernels outside every step form one group
    return grp


def graph_selection_problem(g: Graph, sc: Scenario) -> str | None:
    """Why the scenario's ``cuda_graph`` selection holds no kernel of the trace (then the replay would change nothing
    while looking as if it had applied), naming the phases and steps the trace has; None when it selects some or
    the scenario has no cuda_graph."""
    if not sc.cuda_graph or (_graph_groups(g, sc) >= -1).any():
        return None
    kern = (g.d_kind == 0) & (g.d_launch_seg >= 0)
    phases = sorted({p for p in pc.unique(pc.filter(g.d_phase, pa.array(kern))).to_pylist() if p})
    have = (f"its phases are {', '.join(phases)}" if phases else "it has no phases (no prefill/decode steps)")
    steps = sorted({int(s) for s in g.d_step[kern] if s >= 0})
    have += (f", its steps {steps[0]}..{steps[-1]}" if steps else ", no steps")
    what = ("its steps" if sc.cuda_graph.startswith("step:") else
            "its launched kernels" if sc.cuda_graph == "all" else f"phase {sc.cuda_graph!r}")
    return (f"--cuda-graph {sc.cuda_graph} selects no launched kernel of trace {g.trace_id[:16]} ({what}: {have}); "
            "nothing would change: use --cuda-graph all, a phase it has, or step:N")


def _fusion_plan(g: Graph, chains: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Occurrences of the chains in each process's launch order, greedy and non-overlapping (higher-ranked chains
    first): (head index per fused op or -1, True for the chain heads)."""
    head = np.full(g.n_dev, -1, dtype=np.int64)
    is_head = np.zeros(g.n_dev, dtype=bool)
    kern = np.flatnonzero(g.d_kind == 0)
    if not len(kern) or not chains:
        return head, is_head
    order = kern[np.lexsort((g.d_ts[kern], g.d_order_ts[kern], g.d_pid[kern]))]
    codes = g.d_name_code[order]
    pids = g.d_pid[order]
    name_code = {n: i for i, n in enumerate(g.d_names)}
    taken = np.zeros(len(order), dtype=bool)
    for chain in chains:
        cc = [name_code.get(n, -1) for n in chain]
        L = len(cc)
        if L < 2 or min(cc) < 0 or L > len(order):
            continue
        m = len(order) - L + 1
        ok = np.ones(m, dtype=bool)
        for j, c in enumerate(cc):
            ok &= (codes[j:j + m] == c) & (pids[j:j + m] == pids[:m]) & ~taken[j:j + m]
        pos = np.flatnonzero(ok)
        last = -L
        for p in pos.tolist():  # greedy non-overlap within this chain (loop over occurrences only)
            if p < last + L or taken[p:p + L].any():
                continue
            taken[p:p + L] = True
            is_head[order[p]] = True
            head[order[p + 1:p + L]] = order[p]
            last = p
    return head, is_head


def top_kernel_codes(g: Graph, n: int) -> np.ndarray:
    """The name codes of the ``n`` kernel names with the most total duration (ties: the earlier code)."""
    is_k = g.d_kind == 0
    totals = np.bincount(g.d_name_code[is_k], weights=g.d_dur[is_k].astype(np.float64), minlength=len(g.d_names))
    return np.argsort(-totals, kind="stable")[:n]


def prepare_inputs(g: Graph, sc: Scenario) -> Times:
    """The edge weights of a scenario (see docs/method.md): host / s, launch path x T_sys'/T_sys, kernels / g,
    graph and fusion rewrites."""
    s = float(sc.host_speedup)
    t_sys_factor = (sc.t_sys_ns / g.t_sys_ns if g.t_sys_ns else 1.0) if sc.t_sys_ns is not None else sc.t_sys_scale
    div = np.full(len(g.h_dur), s, dtype=np.float64)
    if sc.framework_speedup != 1.0:
        div[g.h_cat == CAT_FRAMEWORK] *= sc.framework_speedup
    if sc.library_speedup != 1.0:
        div[g.h_cat == CAT_LIBRARY] *= sc.library_speedup
    h_w = np.rint(g.h_dur / div).astype(np.int64) + sc.host_delay_ns * g.h_leaf_ops
    h_wake_w = np.rint(g.h_wake / s).astype(np.int64)
    waited = g.h_await >= 0
    h_w[waited] = h_wake_w[waited]
    is_k = g.d_kind == 0
    d_div = np.where(is_k, float(sc.gpu_speedup), 1.0)
    if sc.top_kernels > 0 and sc.top_kernels_speedup != 1.0 and is_k.any() and g.d_name_code is not None:
        d_div[is_k & np.isin(g.d_name_code, top_kernel_codes(g, sc.top_kernels))] *= sc.top_kernels_speedup
    d_dur = np.rint(g.d_dur / d_div).astype(np.int64)
    d_lat_w = np.rint(g.d_lat_w * t_sys_factor).astype(np.int64)
    d_gap_w = g.d_gap_w.copy()
    d_launch_seg = g.d_launch_seg.copy()
    d_ft_ct = np.rint(g.d_ft_ct / s).astype(np.int64)
    d_tb_charged = g.d_tb_charged.copy()
    d_charged = g.d_charged.copy()
    removed: dict[int, int] = {}
    t_sys_eff = g.t_sys_ns * t_sys_factor
    # CUDA graphs: per step, the first launch becomes the graph launch; the other launch calls cost nothing
    grp = _graph_groups(g, sc)
    if (grp != -2).any():
        idx = np.flatnonzero(grp != -2)
        gid = grp[idx]
        first_seg: dict[int, int] = {}
        for k, gg in zip(idx[np.argsort(g.d_ts[idx], kind="stable")].tolist(),
                         gid[np.argsort(g.d_ts[idx], kind="stable")].tolist(), strict=True):
            seg = int(g.d_launch_seg[k])
            if gg not in first_seg or g.h_ts[seg] < g.h_ts[first_seg[gg]]:
                first_seg[gg] = seg
        heads = np.array([first_seg[x] for x in gid.tolist()], dtype=np.int64)
        drop = np.unique(g.d_launch_seg[idx][g.d_launch_seg[idx] != heads])
        h_w[drop] = 0
        d_launch_seg[idx] = heads
        d_lat_w[idx] = round(t_sys_eff)
        gap = sc.graph_gap_ns if sc.graph_gap_ns is not None else None
        d_gap_w[idx] = gap if gap is not None else g.chain_gap_floor[g.d_chain[idx]]
        # one graph launch per group: the group's first charged kernel carries it (N of T_Orchestrate), and its
        # first kernel is the group's one TKLQT sample
        for gg in np.unique(gid).tolist():
            in_g = idx[gid == gg]
            d_charged[in_g] = False
            d_charged[in_g[np.argmin(g.d_ts[in_g])]] = True
            ch = in_g[d_tb_charged[in_g]]
            if len(ch) > 1:
                keep = ch[np.argmin(g.d_ts[ch])]
                d_tb_charged[ch] = False
                d_tb_charged[keep] = True
                removed[gg] = removed.get(gg, 0) + len(ch) - 1
        if not sc.graph_keep_framework:
            d_ft_ct[idx] = 0
            for gg in np.unique(gid).tolist():
                in_g = idx[gid == gg]
                threads = np.unique(g.h_thread[g.d_launch_seg[in_g]])
                lo = int(g.h_ts[g.d_launch_seg[in_g]].min())
                hi = int(g.h_ts[g.d_launch_seg[in_g]].max())
                if gg >= 0:
                    st = next((x for x in g.steps if x["step_id"] == gg), None)
                    if st is not None:
                        lo, hi = int(st["step_ts_ns"]), int(st["step_end_ns"])
                m = (np.isin(g.h_thread, threads) & (g.h_ts >= lo) & (g.h_ts < hi)
                     & np.isin(g.h_cat, (CAT_FRAMEWORK, CAT_LIBRARY, CAT_LAUNCH, CAT_UNTRACED)))
                m[first_seg[gg]] = False
                h_w[m] = 0
    # fusion: a chain becomes its head kernel (summed duration) and one launch
    if sc.fuse_top > 0 and g.fusion_chains:
        head, is_head = _fusion_plan(g, g.fusion_chains[: sc.fuse_top])
        fused = np.flatnonzero(head >= 0)
        if len(fused):
            np.add.at(d_dur, head[fused], d_dur[fused])
            d_dur[fused] = 0
            d_gap_w[fused] = 0
            segs = g.d_launch_seg[fused]
            h_w[segs[segs >= 0]] = 0
            d_launch_seg[fused] = -2  # no launch edge, no fixed start: follows its stream
            for st, ch in zip(g.d_step[fused].tolist(), d_tb_charged[fused].tolist(), strict=True):
                if ch:
                    removed[st] = removed.get(st, 0) + 1
            d_tb_charged[fused] = False
            d_charged[fused] = False
    return Times(
        h_start=np.empty(0, np.int64), h_end=np.empty(0, np.int64), d_start=np.empty(0, np.int64),
        d_end=np.empty(0, np.int64), d_mprev=np.empty(0, np.int64), d_ready=np.empty(0, np.int64), h_w=h_w,
        h_wake_w=h_wake_w, d_dur=d_dur, d_lat_w=d_lat_w, d_gap_w=d_gap_w, d_launch_seg=d_launch_seg, d_is_kernel=is_k,
        t_sys_eff_ns=t_sys_eff, n_launch_removed=removed, d_ft_ct=d_ft_ct, d_tb_charged=d_tb_charged,
        d_charged=d_charged,
    )


def replay(g: Graph, sc: Scenario | None = None) -> Times:
    """Replay the graph under a scenario (default: identity). One ordered pass over blocks cut at the waiting syncs;
    inside a block each host thread is a cumulative sum and each stream a cumulative max (numpy)."""
    x = prepare_inputs(g, sc or Scenario())
    nh, nd = g.n_host, g.n_dev
    h_end = np.zeros(nh, dtype=np.int64)
    d_start = np.zeros(nd, dtype=np.int64)
    d_end = np.zeros(nd, dtype=np.int64)
    d_mprev = np.full(nd, NEG, dtype=np.int64)
    d_ready = np.full(nd, NEG, dtype=np.int64)
    n_threads = len(g.thread_first) - 1
    anchor = g.h_ts[g.thread_first[:-1]] if n_threads else np.zeros(0, np.int64)
    h_first = np.zeros(nh, dtype=bool)
    if nh:
        h_first[g.thread_first[:-1]] = True
    sync_idx = np.flatnonzero(g.h_await >= 0)
    s_keys = np.unique(g.h_ts[sync_idx] + g.h_dur[sync_idx])
    h_block = np.searchsorted(s_keys, g.h_ts + g.h_dur, side="left")
    d_block = np.searchsorted(s_keys, g.d_ts, side="right")
    # groups: contiguous runs of one (thread, block) / (chain, block)
    def runs(chain: np.ndarray, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not len(chain):
            return np.zeros(0, np.int64), np.zeros(1, np.int64)
        cut = np.flatnonzero((chain[1:] != chain[:-1]) | (block[1:] != block[:-1])) + 1
        starts = np.r_[0, cut]
        return starts, np.r_[starts[1:], len(chain)]

    hs, he = runs(g.h_thread, h_block)
    ds, de = runs(g.d_chain, d_block)
    hs_b = h_block[hs] if len(hs) else np.zeros(0, np.int64)
    ds_b = d_block[ds] if len(ds) else np.zeros(0, np.int64)
    n_blocks = len(s_keys) + 1
    h_by_block = np.searchsorted(hs_b[np.argsort(hs_b, kind="stable")], np.arange(n_blocks + 1))
    d_by_block = np.searchsorted(ds_b[np.argsort(ds_b, kind="stable")], np.arange(n_blocks + 1))
    h_order = np.argsort(hs_b, kind="stable")
    d_order = np.argsort(ds_b, kind="stable")
    sync_block = np.searchsorted(s_keys, g.h_ts[sync_idx] + g.h_dur[sync_idx], side="left")
    sync_by_block = np.searchsorted(sync_block, np.arange(n_blocks + 1))
    s_order = np.argsort(sync_block, kind="stable")
    sync_sorted = sync_idx[s_order]
    sync_by_block = np.searchsorted(sync_block[s_order], np.arange(n_blocks + 1))
    h_w, lat_w, gap_w, dur, lseg = x.h_w, x.d_lat_w, x.d_gap_w, x.d_dur, x.d_launch_seg
    fixed = g.d_ts  # device work without a launch in the trace starts no earlier than it did
    m_run = np.full(int(g.d_chain.max()) + 1 if nd else 0, NEG, dtype=np.int64)
    h_thread, thread_first = g.h_thread, g.thread_first
    hs_l, he_l, ds_l, de_l = hs.tolist(), he.tolist(), ds.tolist(), de.tolist()
    for b in range(n_blocks):
        for gi in h_order[h_by_block[b]:h_by_block[b + 1]].tolist():
            a, e = hs_l[gi], he_l[gi]
            th = h_thread[a]
            carry = anchor[th] if a == thread_first[th] else h_end[a - 1]
            h_end[a:e] = carry + np.cumsum(h_w[a:e])
        for gi in d_order[d_by_block[b]:d_by_block[b + 1]].tolist():
            a, e = ds_l[gi], de_l[gi]
            c = g.d_chain[a]
            ls = lseg[a:e]
            has = ls >= 0
            lsc = np.clip(ls, 0, None)
            hstart = np.where(h_first[lsc], anchor[h_thread[lsc]], h_end[np.clip(lsc - 1, 0, None)])
            r = np.where(has, hstart + lat_w[a:e], np.where(ls == -1, fixed[a:e], NEG))
            d = dur[a:e]
            gw = gap_w[a:e]
            cc = np.cumsum(np.maximum(0, gw + d))
            z = r + d - cc
            m0 = m_run[c]
            z[0] = max(z[0], m0 if m0 > NEG else NEG)
            m = cc + np.maximum.accumulate(z)
            mprev = np.empty_like(m)
            mprev[0] = m0
            mprev[1:] = m[:-1]
            st = np.maximum(r, np.where(mprev > NEG // 2, mprev + gw, NEG))
            d_start[a:e] = st
            d_end[a:e] = st + d
            d_mprev[a:e] = mprev
            d_ready[a:e] = r
            m_run[c] = m[-1]
        for j in sync_sorted[sync_by_block[b]:sync_by_block[b + 1]].tolist():
            v = d_end[g.h_await[j]] + x.h_wake_w[j]
            if v > h_end[j]:
                h_end[j] = v
    h_start = np.empty_like(h_end)
    if nh:
        h_start[1:] = h_end[:-1]
        h_start[h_first] = anchor
    x.h_start, x.h_end, x.d_start, x.d_end, x.d_mprev, x.d_ready = h_start, h_end, d_start, d_end, d_mprev, d_ready
    return x


def observed(g: Graph) -> Times:
    """The trace's own times in the shape of a replay (to compute its figures the same way)."""
    x = prepare_inputs(g, Scenario())
    x.h_start, x.h_end = g.h_ts.copy(), g.h_ts + g.h_dur
    x.d_start, x.d_end = g.d_ts.copy(), g.d_ts + g.d_dur
    x.d_mprev = np.full(g.n_dev, NEG, dtype=np.int64)
    x.d_ready = np.full(g.n_dev, NEG, dtype=np.int64)
    x.h_w, x.d_dur = g.h_dur.copy(), g.d_dur.copy()
    return x


# --- figures per scope -----------------------------------------------------------------------------------------------
@dataclass
class ScopeDef:
    kind: str
    key: str
    kernels: np.ndarray  # device op indices (kernels) in scope
    starts: list[tuple[int, int]]  # (thread or -1, orig ns) candidates; the scope starts at the earliest replayed
    host_windows: list[tuple[int, int]] | None  # orig windows of host time counted (None: the whole trace)
    threads: list[int] = field(default_factory=list)  # host threads that launch the scope's kernels


def scopes(g: Graph) -> list[ScopeDef]:
    """The trace, each step and each phase (steps' phases) of the graph (computed once per graph)."""
    if g.scope_cache is None:
        g.scope_cache = _scopes(g)
        for sd in g.scope_cache:
            ls = g.d_launch_seg[sd.kernels]
            sd.threads = np.unique(g.h_thread[ls[ls >= 0]]).tolist()
    return g.scope_cache


def _scopes(g: Graph) -> list[ScopeDef]:
    k = np.flatnonzero(g.d_kind == 0)
    out = []
    start = [g.il_start] if g.il_start is not None else []
    if not start and len(k):
        start = [(-1, int(g.d_ts[k].min()))]
    out.append(ScopeDef("trace", "trace", k, start, None))
    tkey = {(p, t): i for i, (p, t) in enumerate(zip(g.thread_pid, g.thread_tid, strict=True))}
    phases: dict[str, list[Any]] = {}
    step_k = g.d_step[k]
    order = np.argsort(step_k, kind="stable")
    sorted_steps = step_k[order]
    for st in g.steps:
        lo, hi = np.searchsorted(sorted_steps, [st["step_id"], st["step_id"] + 1])
        kk = k[np.sort(order[lo:hi])]
        if not len(kk):
            continue
        th = tkey.get((st["pid"], st["tid"]), -1)
        out.append(ScopeDef("step", str(st["step_id"]), kk, [(th, int(st["step_ts_ns"]))],
                            [(int(st["step_ts_ns"]), int(st["step_end_ns"]))]))
        if st.get("phase"):
            phases.setdefault(st["phase"], []).append((st, th, kk))
    for ph, items in sorted(phases.items()):
        kk = np.concatenate([x[2] for x in items])
        out.append(ScopeDef("phase", ph, np.unique(kk), [(th, int(st["step_ts_ns"])) for st, th, _ in items],
                            [(int(st["step_ts_ns"]), int(st["step_end_ns"])) for st, _, _ in items]))
    return out


def host_time(g: Graph, x: Times, thread: int, t: int) -> int:
    """The replayed time of original instant ``t`` on a host thread (inside a segment: proportionally)."""
    if thread < 0 or thread >= len(g.thread_first) - 1:
        return int(t)
    a, e = int(g.thread_first[thread]), int(g.thread_first[thread + 1])
    if e <= a:
        return int(t)
    i = int(np.searchsorted(g.h_ts[a:e], t, side="right")) - 1 + a
    if i < a:
        return int(x.h_start[a] - (g.h_ts[a] - t))
    off = t - g.h_ts[i]
    if off >= g.h_dur[i]:
        return int(x.h_end[i] + (off - g.h_dur[i]))
    span = x.h_end[i] - x.h_start[i]
    return int(x.h_start[i] + (off * span) // g.h_dur[i]) if g.h_dur[i] else int(x.h_start[i])


def _merged_busy(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> int:
    if not len(s):
        return 0
    o = np.argsort(s, kind="stable")
    s, e = np.clip(s[o], lo, hi), np.clip(e[o], lo, hi)
    prev = np.maximum.accumulate(e)
    start_new = np.r_[True, s[1:] > prev[:-1]]
    grp = np.cumsum(start_new) - 1
    st = s[start_new]
    en = np.maximum.reduceat(e, np.flatnonzero(start_new))
    del grp
    return int((en - st).sum())


def figures(g: Graph, x: Times, sd: ScopeDef) -> dict[str, Any]:
    """IL, GPU idle, TKLQT, T_DeviceActive, T_Orchestrate, HDBI and HDBI_wall of a scope under times ``x``."""
    kk = sd.kernels
    if not len(kk):
        return {}
    start = min(host_time(g, x, th, t) if th >= 0 else t for th, t in sd.starts) if sd.starts else int(
        x.d_start[kk].min())
    end = int(x.d_end[kk].max())
    il = end - start
    busy = _merged_busy(x.d_start[kk], x.d_end[kk], start, end)
    ch = kk[x.d_charged[kk] & (x.d_launch_seg[kk] >= 0)]
    ls = x.d_launch_seg[ch]
    lstart = x.h_start[ls]
    samples = x.d_start[ch] - lstart
    tklqt = int(samples[samples >= 0].sum())
    t_da = int(x.d_dur[kk].sum())
    # dFT + dCT of the linked launches (graphs without framework zero theirs; fusion keeps them: the ops still run),
    # N' = the linked launches left in this scenario (graphs and fusion remove some)
    n_launch = int(x.d_tb_charged[kk].sum())
    t_orch = int(x.d_ft_ct[kk[g.d_tb_charged[kk]]].sum()) + round(n_launch * x.t_sys_eff_ns)
    hdbi = t_da / (t_da + t_orch) if t_da + t_orch > 0 else None
    # HDBI_wall: host launch + library + framework time of the threads that launch the scope's kernels
    threads = sd.threads
    if x.wall_cs is None:
        wall = np.isin(g.h_cat, (CAT_LAUNCH, CAT_LIBRARY, CAT_FRAMEWORK)) & ~g.h_blocked
        x.wall_cs = np.r_[0, np.cumsum(np.where(wall, x.h_w, 0))]
    host_parts = 0
    for th in threads:  # segments of the launching threads (inside the scope's windows): prefix-sum differences
        a, e = int(g.thread_first[th]), int(g.thread_first[th + 1])
        for lo, hi in sd.host_windows if sd.host_windows is not None else [(None, None)]:
            i = a if lo is None else a + int(np.searchsorted(g.h_ts[a:e], lo, side="left"))
            j = e if hi is None else a + int(np.searchsorted(g.h_ts[a:e], hi, side="left"))
            host_parts += int(x.wall_cs[j] - x.wall_cs[i]) if j > i else 0
    hdbi_wall = t_da / (t_da + host_parts) if t_da + host_parts > 0 else None
    return {"il_ns": il, "il_start_ns": start, "il_end_ns": end, "gpu_idle_ns": il - busy, "tklqt_ns": tklqt,
            "t_device_active_ns": t_da, "t_orchestrate_ns": t_orch, "hdbi": hdbi, "hdbi_wall": hdbi_wall,
            "host_wall_parts_ns": host_parts}


# --- critical path ---------------------------------------------------------------------------------------------------
CP_PARTS = ("framework", "library", "launch", "launch_path", "sync", "other_runtime", "untraced", "kernel", "memcpy",
            "memset", "gpu_gap")
_HOST_CP = {CAT_LAUNCH: "launch", CAT_LIBRARY: "library", CAT_FRAMEWORK: "framework", CAT_SYNC: "sync",
            CAT_OTHER: "other_runtime", CAT_UNTRACED: "untraced", CAT_UNRESOLVED: "untraced"}


class _CP:
    """Walks the critical path backwards through the replay's binding edges; runs of chain edges in O(1) each."""

    def __init__(self, g: Graph, x: Times) -> None:
        self.g, self.x = g, x
        nh, nd = g.n_host, g.n_dev
        idx_h = np.arange(nh)
        first = np.zeros(nh, dtype=bool)
        if nh:
            first[g.thread_first[:-1]] = True
        self.h_first = first
        self.h_xb = (g.h_await >= 0) & (x.h_end > x.h_start + x.h_w)
        self.h_lastbrk = np.maximum.accumulate(np.where(self.h_xb | first, idx_h, 0)) if nh else idx_h
        stream_term = np.where(x.d_mprev > NEG // 2, x.d_mprev + x.d_gap_w, NEG)
        self.d_lat = (x.d_ready > NEG // 2) & (x.d_ready >= stream_term) & (x.d_launch_seg >= 0)
        self.d_sb = ~self.d_lat & (stream_term > NEG // 2) & (x.d_start == stream_term)
        idx_d = np.arange(nd)
        self.d_lastbrk = np.maximum.accumulate(np.where(~self.d_sb, idx_d, 0)) if nd else idx_d
        self.h_cs = {c: np.r_[0, np.cumsum(np.where(g.h_cat == c, x.h_w, 0))] for c in _HOST_CP}
        self.d_cs = {k: np.r_[0, np.cumsum(np.where(g.d_kind == i, x.d_end - x.d_start, 0))]
                     for i, k in enumerate(DEV_KINDS)}
        self.gap_cs = np.r_[0, np.cumsum(np.where(self.d_sb, x.d_start - np.where(x.d_mprev > NEG // 2, x.d_mprev, 0),
                                                  0))]

    def walk(self, k: int, t0: int) -> dict[str, int]:
        """Critical-path parts from the end of device op ``k`` back to time ``t0`` (ns)."""
        g, x = self.g, self.x
        parts = dict.fromkeys(CP_PARTS, 0)
        node, is_dev = k, True
        guard = g.n_host + g.n_dev + 2
        while guard > 0:
            guard -= 1
            if is_dev:
                lb = int(self.d_lastbrk[node])
                if x.d_start[lb] < t0:  # the run crosses the scope start: find the first op ending after it
                    i = lb + int(np.searchsorted(x.d_end[lb:node + 1], t0, side="right"))
                    i = min(i, node)
                    for kind in DEV_KINDS:
                        parts[kind] += int(self.d_cs[kind][node + 1] - self.d_cs[kind][i + 1])
                    kind_i = DEV_KINDS[g.d_kind[i]]
                    parts[kind_i] += int(x.d_end[i] - max(int(x.d_start[i]), t0))
                    parts["gpu_gap"] += int(self.gap_cs[node + 1] - self.gap_cs[i + 1])
                    break
                for kind in DEV_KINDS:
                    parts[kind] += int(self.d_cs[kind][node + 1] - self.d_cs[kind][lb])
                parts["gpu_gap"] += int(self.gap_cs[node + 1] - self.gap_cs[lb + 1])
                if not self.d_lat[lb]:
                    break  # a start fixed by the trace (no launch edge)
                seg = int(x.d_launch_seg[lb])
                hs = int(x.h_start[seg])
                parts["launch_path"] += int(x.d_start[lb]) - max(hs, t0)
                if hs <= t0 or self.h_first[seg]:
                    break
                node, is_dev = seg - 1, False
            else:
                lb = int(self.h_lastbrk[node])
                xb = bool(self.h_xb[lb])
                a = lb + 1 if xb else lb
                # the chain run a..node; clipped at t0
                if x.h_start[a] < t0 if a <= node else False:
                    i = a + int(np.searchsorted(x.h_end[a:node + 1], t0, side="right"))
                    i = min(i, node)
                    for c, name in _HOST_CP.items():
                        parts[name] += int(self.h_cs[c][node + 1] - self.h_cs[c][i + 1])
                    parts[_HOST_CP[int(g.h_cat[i])]] += int(x.h_end[i] - max(int(x.h_start[i]), t0))
                    break
                for c, name in _HOST_CP.items():
                    parts[name] += int(self.h_cs[c][node + 1] - self.h_cs[c][a])
                if not xb:
                    break  # the thread's first segment
                # the waiting sync: its wake-up, then the device work it waited for
                end_dev = int(x.d_end[g.h_await[lb]])
                parts["sync"] += int(x.h_end[lb]) - max(end_dev, t0)
                if end_dev <= t0:
                    break
                node, is_dev = int(g.h_await[lb]), True
        return parts


def critical_path(g: Graph, x: Times, sd: ScopeDef, fig: dict[str, Any], walker: _CP | None = None) -> dict[str, Any]:
    """The scope's critical path from its last kernel end back to its start, split into host and device parts."""
    if not fig:
        return {}
    w = walker or _CP(g, x)
    kk = sd.kernels
    last = int(kk[np.argmax(x.d_end[kk])])
    parts = w.walk(last, int(fig["il_start_ns"]))
    total = int(fig["il_ns"])
    host = sum(parts[p] for p in ("framework", "library", "launch", "launch_path", "sync", "other_runtime",
                                  "untraced"))
    device = parts["kernel"] + parts["memcpy"] + parts["memset"] + parts["gpu_gap"]
    out = {f"cp_{p}_ns": v for p, v in parts.items()}
    out["cp_total_ns"] = total
    out["cp_host_ns"] = host
    out["cp_device_ns"] = device
    out["cp_unattributed_ns"] = total - host - device
    out["cp_host_share"] = host / total if total > 0 else None
    traced = parts["framework"] + parts["library"] + parts["launch"] + parts["launch_path"]
    out["cp_host_orchestration_share"] = traced / total if total > 0 else None
    return out


# --- running scenarios -----------------------------------------------------------------------------------------------
def run_scenario(g: Graph, sc: Scenario, own: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Replay one scenario: per scope, the trace's own figures and the replay's, and the replay's critical path."""
    t0 = time.perf_counter()
    x = replay(g, sc)
    replay_s = time.perf_counter() - t0
    scs = scopes(g)
    if own is None:
        obs = observed(g)
        own = [figures(g, obs, sd) for sd in scs]
    w = _CP(g, x)
    rows = []
    for sd, o in zip(scs, own, strict=True):
        f = figures(g, x, sd)
        if not f:
            continue
        cp = critical_path(g, x, sd, f, w)
        rows.append({"scope_kind": sd.kind, "scope_key": sd.key, "kernels": len(sd.kernels), "own": o, "replay": f,
                     "critical_path": cp, "table": g.scope_own.get((sd.kind, sd.key), {})})
    return {"trace_id": g.trace_id, "scenario": sc, "replay_s": replay_s, "t_sys_ns": g.t_sys_ns, "scopes": rows}


def run_scenarios(g: Graph, scenarios: list[Scenario]) -> list[dict[str, Any]]:
    obs = observed(g)
    own = [figures(g, obs, sd) for sd in scopes(g)]
    return [run_scenario(g, sc, own) for sc in scenarios]


# --- warehouse tables ---------------------------------------------------------------------------------------------
# whatif_results and critical_path are Python nodes of the plan (sql/whatif/*.sql: header only), levers a SQL one
# run after them; their docs and COMMENT ON text are those headers (taxbreak.engine.plan).
WHATIF_STAGE = "whatif"
# what the replay reads (whatif_results' node), of which these two only when there
OPTIONAL_TABLES = ("fusion_candidates", "taxbreak_by_scope")
REQUIRED_TABLES = tuple(t for t in plan.node("whatif_results").reads if t not in OPTIONAL_TABLES)


_CP_COLS = ["cp_total_ns", "cp_host_ns", "cp_device_ns"] + [f"cp_{p}_ns" for p in CP_PARTS] + [
    "cp_unattributed_ns", "cp_host_share", "cp_host_orchestration_share"]


def result_rows(results: list[dict[str, Any]]) -> tuple[pa.Table, pa.Table]:
    """(whatif_results, critical_path) rows of scenario results."""
    rr: list[dict[str, Any]] = []
    cr: list[dict[str, Any]] = []
    for res in results:
        sc: Scenario = res["scenario"]
        t_sys_rep = sc.t_sys_ns if sc.t_sys_ns is not None else res["t_sys_ns"] * sc.t_sys_scale
        for s in res["scopes"]:
            o, r = s["own"], s["replay"]
            rr.append({
                "trace_id": res["trace_id"], "scenario": sc.name, "scenario_json": sc.as_json(),
                "host_speedup": float(sc.host_speedup), "t_sys_replay_ns": int(round(t_sys_rep)),
                "gpu_speedup": float(sc.gpu_speedup), "scope_kind": s["scope_kind"], "scope_key": s["scope_key"],
                "kernels": s["kernels"], "il_own_ns": o.get("il_ns"), "il_replay_ns": r["il_ns"],
                "il_ratio": r["il_ns"] / o["il_ns"] if o.get("il_ns") else None,
                "hdbi_own": o.get("hdbi"), "hdbi_replay": r["hdbi"], "hdbi_wall_own": o.get("hdbi_wall"),
                "hdbi_wall_replay": r["hdbi_wall"], "hdbi_wall_table": s.get("table", {}).get("hdbi_wall"),
                "gpu_idle_own_ns": o.get("gpu_idle_ns"),
                "gpu_idle_replay_ns": r["gpu_idle_ns"], "tklqt_own_ns": o.get("tklqt_ns"),
                "tklqt_replay_ns": r["tklqt_ns"], "t_orchestrate_replay_ns": r["t_orchestrate_ns"],
                "t_device_active_replay_ns": r["t_device_active_ns"], "replay_s": res["replay_s"],
            })
            cp = s["critical_path"]
            cr.append({"trace_id": res["trace_id"], "scenario": sc.name, "scope_kind": s["scope_kind"],
                       "scope_key": s["scope_key"], **{c: cp.get(c) for c in _CP_COLS}})
    rschema = pa.schema([
        ("trace_id", pa.string()), ("scenario", pa.string()), ("scenario_json", pa.string()),
        ("host_speedup", pa.float64()), ("t_sys_replay_ns", pa.int64()), ("gpu_speedup", pa.float64()),
        ("scope_kind", pa.string()), ("scope_key", pa.string()), ("kernels", pa.int64()), ("il_own_ns", pa.int64()),
        ("il_replay_ns", pa.int64()), ("il_ratio", pa.float64()), ("hdbi_own", pa.float64()),
        ("hdbi_replay", pa.float64()), ("hdbi_wall_own", pa.float64()), ("hdbi_wall_replay", pa.float64()),
        ("hdbi_wall_table", pa.float64()),
        ("gpu_idle_own_ns", pa.int64()), ("gpu_idle_replay_ns", pa.int64()), ("tklqt_own_ns", pa.int64()),
        ("tklqt_replay_ns", pa.int64()), ("t_orchestrate_replay_ns", pa.int64()),
        ("t_device_active_replay_ns", pa.int64()), ("replay_s", pa.float64()),
    ])
    cschema = pa.schema([("trace_id", pa.string()), ("scenario", pa.string()), ("scope_kind", pa.string()),
                         ("scope_key", pa.string())]
                        + [(c, pa.float64() if c.endswith("share") else pa.int64()) for c in _CP_COLS])
    return pa.Table.from_pylist(rr, schema=rschema), pa.Table.from_pylist(cr, schema=cschema)


def write_tables(con: duckdb.DuckDBPyConnection, results: list[dict[str, Any]]) -> dict[str, int]:
    """Publish scenario results into the warehouse on ``con``: each (trace, scenario)'s old rows are replaced, in
    one transaction (nothing half-written)."""

    res_t, cp_t = result_rows(results)
    docs = {sf.name: sf for sf in plan.nodes(WHATIF_STAGE)}
    keys = sorted({(r["trace_id"], r["scenario"].name) for r in results})
    with publication(con):  # joins the caller's publication when there is one
        for name, tbl in (("whatif_results", res_t), ("critical_path", cp_t)):
            con.register("_wi_rows", tbl)
            con.execute(f"CREATE TABLE IF NOT EXISTS main.{_q(name)} AS SELECT * FROM _wi_rows LIMIT 0")
            for tid in sorted({t for t, _ in keys}):  # one pass over the table per trace, not one per scenario
                con.execute(f"DELETE FROM main.{_q(name)} WHERE trace_id = $t AND scenario IN "
                            "(SELECT unnest($s::VARCHAR[]))", {"t": tid, "s": [s for t, s in keys if t == tid]})
            con.execute(f"INSERT INTO main.{_q(name)} SELECT * FROM _wi_rows")
            con.unregister("_wi_rows")
            plan.comment_on(con, f"main.{_q(name)}", docs[name], tbl.column_names)
        n_levers = _write_levers(con, docs["levers"], sorted({t for t, _ in keys}))
    return {"whatif_results": res_t.num_rows, "critical_path": cp_t.num_rows, "levers": n_levers}


def _write_levers(con: duckdb.DuckDBPyConnection, sf: Any, trace_ids: list[str]) -> int:
    """Replace the levers of ``trace_ids`` from their whatif_results rows (inside the caller's publication). A table
    whose columns differ from the statement's (an older release) is rebuilt, keeping nothing stale."""

    if not trace_ids or not all(has_relation(con, t) for t in sf.reads):
        return 0
    want = [d[0] for d in con.execute(f"SELECT * FROM ({sf.text}) LIMIT 0", {"trace_ids": []}).description]
    have = [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'levers' AND schema_name = 'main' "
        "AND database_name = current_database() ORDER BY column_index").fetchall()]
    if have != want:
        con.execute("DROP TABLE IF EXISTS main.levers")
        con.execute(f"CREATE TABLE main.levers AS SELECT * FROM ({sf.text}) LIMIT 0", {"trace_ids": []})
    con.execute("DELETE FROM main.levers WHERE trace_id IN (SELECT unnest($t::VARCHAR[]))", {"t": trace_ids})
    n = con.execute(f"INSERT INTO main.levers {sf.text}", {"trace_ids": trace_ids}).fetchone()[0]
    plan.comment_on(con, "main.levers", sf, want)
    return int(n)


def replay_traces(con: duckdb.DuckDBPyConnection, lake_root: str | os.PathLike[str], trace_ids: list[str],
                  scenarios: list[Scenario] | None = None,
                  skipped: Callable[[str, str], None] | None = None) -> list[dict[str, Any]]:
    """Build each trace's graph from the analysis tables ``con`` sees (a reader's connection is enough: nothing is
    written) and the lake, and replay the scenarios (default: ``default_scenarios()``); the results, for
    ``write_tables``.  Traces without kernels give none; a trace not analysed or without events in the lake raises
    LookupError, or, with ``skipped``, is reported to it (trace id, why) and left out."""
    out: list[dict[str, Any]] = []
    for tid in trace_ids:
        try:
            g = build_graph(con, lake_root, tid)
        except LookupError as exc:
            if skipped is None:
                raise
            skipped(tid, str(exc))
            continue
        if (g.d_kind == 0).any():
            out.extend(run_scenarios(g, scenarios or default_scenarios()))
    return out


def compute_and_write(con: duckdb.DuckDBPyConnection, lake_root: str | os.PathLike[str], trace_ids: list[str],
                      scenarios: list[Scenario] | None = None) -> dict[str, int]:
    """``replay_traces`` and ``write_tables`` on one connection (the warehouse's writer): rows of every trace given."""
    out = {sf.name: 0 for sf in plan.nodes(WHATIF_STAGE)}
    for tid in trace_ids:  # one publication per trace: a trace's rows never wait for the next trace's replay
        for k, v in write_tables(con, replay_traces(con, lake_root, [tid], scenarios)).items():
            out[k] += v
    return out


def host_span(g: Graph, x: Times) -> int | None:
    """The host timeline's length under times ``x`` (ns): from the first step start to the last step end on the
    steps' thread, else the busiest thread's first segment start to last segment end. What a CPU-only capture
    (no kernels, no IL) is compared on."""
    tkey = {(p, t): i for i, (p, t) in enumerate(zip(g.thread_pid, g.thread_tid, strict=True))}
    st = [s for s in g.steps if (s["pid"], s["tid"]) in tkey]
    if st:
        lo = min(st, key=lambda s: s["step_ts_ns"])
        hi = max(st, key=lambda s: s["step_end_ns"])
        return host_time(g, x, tkey[(hi["pid"], hi["tid"])], int(hi["step_end_ns"])) - host_time(
            g, x, tkey[(lo["pid"], lo["tid"])], int(lo["step_ts_ns"]))
    if len(g.thread_first) < 2:
        return None
    sizes = np.diff(g.thread_first)
    th = int(np.argmax(sizes))
    a, e = int(g.thread_first[th]), int(g.thread_first[th + 1])
    return int(x.h_end[e - 1] - x.h_start[a])
