"""The Python API: the read model as pandas DataFrames, for notebooks (docs/api.md).

    import taxbreak as tb
    wh = tb.open()                        # the configured warehouse, read-only (never blocks a writer)
    wh.traces()                           # the catalogue
    s = wh.summary("Qwen")                # what `taxbreak summary` shows, verdict first
    s.verdict, s.headline, s.kernels, s.ops, s.phases, s.caveats
    wh.sql("SELECT ...")                  # a DataFrame (arrow=True: an Arrow table)
    wh.whatif("Qwen", host_speedup=1.5)   # the what-if replay
    tb.analyze_file("trace.json.gz")      # ingest + analyse one file into a warehouse of its own; its Summary

Every figure comes from the functions the CLI, the report and the Dagster metadata read
(taxbreak.read.readmodel, taxbreak.read.trend, taxbreak.features.whatif): none is computed here.  The objects
render as HTML
tables in Jupyter (``_repr_html_``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from taxbreak.config import Paths, ingest_limits
from taxbreak.engine import runner
from taxbreak.engine.checks import InvariantBroken
from taxbreak.engine.rules import RunConfig
from taxbreak.features import whatif
from taxbreak.ingest import Lake, ingest_file
from taxbreak.read import readmodel, trend
from taxbreak.store.query import check_statements, open_readonly
from taxbreak.store.warehouse import WarehouseBusy

__all__ = ["Summary", "Warehouse", "WhatIf", "analyze_file", "ingest_and_analyze", "open"]


def _frame(rows: list[dict[str, Any]] | None) -> pd.DataFrame:
    return pd.DataFrame(rows or [])


@dataclass
class Summary:
    """One trace's summary (readmodel.summary): the verdict first, then the figures, as DataFrames."""

    trace_id: str
    file_name: str
    verdict: dict[str, Any] | None  # bound, confidence, reason, evidence, levers (docs/method.md "The verdict")
    headline: dict[str, Any]  # every headline figure of the trace (taxbreak_by_scope, skip_by_trace, ...)
    caveats: list[dict[str, str]]
    phases: pd.DataFrame  # taxbreak_by_scope rows of the trace's phases
    kernels: pd.DataFrame  # the top kernels by time (skip_by_kernel)
    kernels_by_count: pd.DataFrame
    fusion: pd.DataFrame  # the top fusion candidates
    ops: pd.DataFrame  # taxbreak_by_scope rows per framework op, by T_Orchestrate
    raw: dict[str, Any] = field(repr=False)  # readmodel.summary's dict

    @property
    def levers(self) -> pd.DataFrame:
        """The ranked levers with their replayed IL change (empty before the what-if replay ran)."""
        return _frame((self.verdict or {}).get("levers"))

    def text(self) -> str:
        """What `taxbreak summary` prints."""
        return readmodel.format_summary(self.raw)

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        from html import escape

        block = "<br>".join(escape(x.strip()) for x in readmodel.format_verdict(self.verdict, self.caveats))
        figures = pd.DataFrame([{k: self.headline.get(k) for k in (
            "kernels", "linked_fraction", "hdbi", "hdbi_linked", "hdbi_wall", "t_orchestrate_ns", "delta_ft_ns",
            "delta_ct_ns", "delta_kt_ns", "t_device_active_ns", "kpt", "tklqt_ns", "il_ns")}])
        return (f"<h4>{escape(self.file_name)} <small>{self.trace_id[:16]}</small></h4><p>{block}</p>"
                + figures.to_html(index=False)
                + f"<p><small>tklqt_ns: TKLQT, {escape(readmodel.tklqt_note(self.headline))}</small></p>"
                + "<h5>top kernels</h5>" + self.kernels.head(5).to_html(index=False))


@dataclass
class WhatIf:
    """A what-if replay of one trace (taxbreak.features.whatif.run_scenarios): per scope the trace's own and replayed
    figures."""

    trace_id: str
    scenario: dict[str, Any]
    scopes: pd.DataFrame  # scope_kind, scope_key, own_*/replay_* figures
    raw: dict[str, Any] = field(repr=False)

    @property
    def il_ratio(self) -> float | None:
        """Replayed / own IL of the trace scope."""
        t = self.scopes[self.scopes.scope_kind == "trace"]
        return None if t.empty or not t.own_il_ns.iloc[0] else float(t.replay_il_ns.iloc[0] / t.own_il_ns.iloc[0])

    def _repr_html_(self) -> str:
        return f"<h4>what-if {self.scenario.get('name')}</h4>" + self.scopes.to_html(index=False)


class Warehouse:
    """A read-only view of a warehouse (its readers' snapshot while a writer works: taxbreak.store.query)."""

    def __init__(self, warehouse: str | os.PathLike[str] | None = None, lake: str | os.PathLike[str] | None = None):
        paths = Paths.from_env()
        self.warehouse = Path(warehouse) if warehouse is not None else paths.warehouse
        self.lake = Path(lake) if lake is not None else (self.warehouse.parent / "lake" if warehouse is not None
                                                          else paths.lake)

    @contextlib.contextmanager
    def _con(self, sandbox: bool = False):  # noqa: ANN202 - a DuckDB connection
        opened = open_readonly(self.warehouse, self.lake if sandbox else None, sandbox=sandbox)
        try:
            yield opened.con
        finally:
            opened.con.close()

    def traces(self, all: bool = False, arrow: bool = False) -> pd.DataFrame | Any:  # `all`: as `traces --all`
        """The lake's catalogue as `taxbreak traces` lists it (readmodel.catalogue): one row per trace file, ingested
        or failed with its error, oldest first; files that are no trace at all (status ``not_a_trace``) only with
        ``all=True``, as ``--all``. ``arrow``: a pyarrow Table."""
        listed, _ = readmodel.catalogue(self.lake, all=all)
        return listed if arrow else listed.to_pandas()

    def summary(self, trace: str, top: int = 5) -> Summary:
        """What `taxbreak summary TRACE` shows (TRACE: id prefix, file name, stem or unique substring)."""
        with self._con() as con:
            s = readmodel.summary(None, trace, top_k=top, con=con)
            tid = s["headline"]["trace_id"]
            ops = con.execute("SELECT * FROM taxbreak_by_scope WHERE trace_id = $t AND scope_kind = 'op' "
                              "ORDER BY t_orchestrate_ns DESC", {"t": tid}).df()
        h = s["headline"]
        return Summary(trace_id=tid, file_name=h["file_name"], verdict=s.get("verdict"), headline=h,
                       caveats=s["caveats"], phases=_frame(s["phases"]), kernels=_frame(s["top_kernels_by_time"]),
                       kernels_by_count=_frame(s["top_kernels_by_count"]), fusion=_frame(s["top_fusion"]), ops=ops,
                       raw=s)

    def sql(self, query: str, arrow: bool = False) -> pd.DataFrame | Any:
        """Run a query in `taxbreak sql`'s sandbox (it reads; it writes nothing a writer reads: taxbreak.store.query)
        and
        return a DataFrame (``arrow``: a pyarrow Table)."""

        with self._con(sandbox=True) as con:
            check_statements(con, query)  # SandboxRefused (a ValueError) for COPY, ATTACH, ...
            return con.sql(query).to_arrow_table() if arrow else con.execute(query).df()

    def trend(self, workload: str | None = None) -> pd.DataFrame:
        """The workloads (None), or one workload's runs (a workload id prefix or a trace name;
        taxbreak.read.trend)."""

        with self._con() as con:
            if workload is None:
                return _frame(trend.workloads(con))
            return _frame(trend.trend(con, trend.resolve_workload(con, workload))["runs"])

    def whatif(self, trace: str, **scenario: Any) -> WhatIf:
        """Replay ``trace`` under a scenario (taxbreak.features.whatif.Scenario fields: host_speedup, t_sys_ns,
        gpu_speedup,
        cuda_graph, fuse_top, host_delay_ns, framework_speedup, library_speedup, ...)."""
        from dataclasses import asdict

        sc = whatif.Scenario(name=scenario.pop("name", "api"), **scenario)
        with self._con() as con:
            tid = readmodel.resolve_trace(con, trace)
            g = whatif.build_graph(con, self.lake, tid)
            if not (g.d_kind == 0).any():
                raise ValueError(f"trace {tid[:16]} has no kernels: nothing to replay")
            (res,) = whatif.run_scenarios(g, [sc])
        rows = [{"scope_kind": s["scope_kind"], "scope_key": s["scope_key"],
                 **{f"own_{k}": v for k, v in s["own"].items()}, **{f"replay_{k}": v for k, v in s["replay"].items()}}
                for s in res["scopes"]]
        return WhatIf(trace_id=tid, scenario=asdict(sc), scopes=_frame(rows), raw=res)

    def __repr__(self) -> str:
        return f"taxbreak.Warehouse({str(self.warehouse)!r})"


def open(warehouse: str | os.PathLike[str] | None = None, lake: str | os.PathLike[str] | None = None) -> Warehouse:  # noqa: A001
    """The configured warehouse (taxbreak.toml, $TAXBREAK_WAREHOUSE, warehouse/), or the DuckDB file given; its
    lake is the configured one, or ``lake/`` beside a given file."""
    return Warehouse(warehouse, lake)


def ingest_and_analyze(path: str | os.PathLike[str], lake: Path, warehouse: Path, log: Any = None) -> str:
    """Ingest ``path`` into ``lake`` (``ingest_file``, as ``taxbreak ingest``) and analyse it into ``warehouse``
    through the one run every writer takes (``taxbreak.engine.runner.run``, as ``taxbreak analyze --trace``); its
    trace id.  ``log`` (a text stream, default none) hears one line per step.  ValueError naming the file and the
    problem when it does not ingest, is no trace, or does not analyse.  The one path of ``analyze_file`` and
    ``summary FILE``."""
    paths = replace(Paths.from_env(), lake=Path(lake), warehouse=Path(warehouse))
    res = ingest_file(path, Lake(paths.lake), cache_dir=paths.cache, limits=ingest_limits())
    why = (res.error or "").removeprefix(f"{path}: ")  # the ingest's message names the file already
    if res.status == "failed":
        raise ValueError(f"{path}: not ingested: {why}")
    if res.status == "not_a_trace" or Lake(paths.lake).catalogue_row(res.trace_id) is None:
        raise ValueError(f"{path}: not a trace file taxbreak reads" + (f" ({why})" if why else ""))
    if log is not None:
        print(f"ingested {path} into {paths.lake} as trace {res.trace_id[:16]} ({res.status})", file=log)
    try:
        runner.run(paths, traces=[res.trace_id], config=RunConfig.from_settings())
    except (InvariantBroken, WarehouseBusy) as exc:
        raise ValueError(f"{path}: analysis failed: {exc}") from exc
    if log is not None:
        print(f"analysed trace {res.trace_id[:16]} into {paths.warehouse}", file=log)
    return res.trace_id


def analyze_file(path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> Summary:
    """Ingest and analyse one trace file into ``home`` (``lake/`` and ``taxbreak.duckdb`` there; default a new
    temporary folder, kept) through the same steps as the CLI (``ingest_and_analyze``), and return its Summary;
    ``Summary.raw["home"]`` says where.  Raises ValueError naming the file and the problem."""
    home = Path(home) if home is not None else Path(tempfile.mkdtemp(prefix="taxbreak_"))
    lake, wh = home / "lake", home / "taxbreak.duckdb"
    tid = ingest_and_analyze(path, lake, wh)
    s = Warehouse(wh, lake).summary(tid[:16])
    s.raw["home"] = str(home)
    return s
