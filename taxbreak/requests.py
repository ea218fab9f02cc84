"""Per-request latency attribution for co-batched serving steps (LLMVisor; docs/method.md, "Per-request latency
attribution").

A serving engine runs many requests per step, so a step's latency (and its host orchestration) is shared. The
model of a step B with requests i (Jin et al., LLMVisor, arXiv 2608.08382)::

    T(B) = beta + a1 * sum p_i + a2 * sum c_i + a3 * sum p_i^2 + a4 * |B|

p_i: tokens the request processed in the step (its prompt chunk in prefill, 1 in decode); c_i: tokens already in
its KV cache (attended context). It is fitted per (model, GPU, phase) by least squares, with two segments per phase
(memory-bound below the breakpoint on sum p, compute-bound above). Ours: the breakpoint is chosen by grid search
on sum p minimising the squared error; a term that is collinear with an earlier one over the phase's steps (in
decode sum p = |B| = sum p^2) is dropped (its coefficient stored as 0 and named in ``dropped_terms``); 'mixed'
steps (prefill and decode requests together) are fitted as a third phase of the same form.

Each request's share of a step is ``a1 p_i + a2 c_i + a3 p_i^2 + (beta + a4 |B|) / |B|``; the shares add up to the
step's prediction exactly. The step's device time and its host orchestration (T_Orchestrate) are split by the same
fractions (the orchestration split is ours). Beside every fit the token-count baseline ``alpha + gamma * sum p``
is fitted on the same steps, with the same error figures.

Where things live: the per-step sums are the warehouse table ``serving_steps`` (sql/serving_steps.sql); this module
fits (vectorised numpy, cumulative normal equations over the grid) and writes ``request_model_fit`` through
``sql/requests/request_model_fit.sql``; the per-step predictions and the shares are SQL (``sql/requests/*.sql``),
run after each fit by ``refit``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from taxbreak.plan import SQL_DIR, SqlFile, parse_sql_file

TERMS = ("beta", "a1", "a2", "a3", "a4")
TERM_FEATURES = ("1", "sum p", "sum c", "sum p^2", "|B|")
GRID_POINTS = 128  # coarse candidate breakpoints: quantiles of sum p, refined around the best (ours)
MIN_SEGMENT_STEPS = 15  # fewest steps a segment may hold: 3 per coefficient (ours)
REQUEST_SQL_DIR = SQL_DIR / "requests"
# The statements run after a fit, in this order (each reads the ones before and the warehouse's serving tables).
REQUEST_TABLES = ("request_model_fit", "request_step_fit", "request_step_shares", "request_totals", "request_tenants")


class RequestsError(RuntimeError):
    """The attribution cannot run as asked; the message says why."""


# --- fitting -------------------------------------------------------------------------------------------------------
def design(tokens_sum: np.ndarray, context_sum: np.ndarray, tokens_sq_sum: np.ndarray,
           batch_requests: np.ndarray) -> np.ndarray:
    """The model's features per step, columns in TERMS order: 1, sum p, sum c, sum p^2, |B| (float64)."""
    n = len(tokens_sum)
    return np.column_stack([np.ones(n), tokens_sum, context_sum, tokens_sq_sum, batch_requests]).astype(np.float64)


def _kept_terms(x: np.ndarray) -> np.ndarray:
    """A boolean mask over the columns: a column is kept when it is not (numerically) in the span of the kept
    columns before it, over all of the phase's steps."""
    keep = np.zeros(x.shape[1], dtype=bool)
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    for j in range(x.shape[1]):
        col = xs[:, j]
        if not np.any(col):
            continue
        if keep.any():
            basis = xs[:, keep]
            coef, *_ = np.linalg.lstsq(basis, col, rcond=None)
            resid = col - basis @ coef
            if np.linalg.norm(resid) <= 1e-9 * max(np.linalg.norm(col), 1e-300):
                continue
        keep[j] = True
    return keep


def _solve(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Least-squares coefficients from stacked normal equations (k, m, m) / (k, m), by pseudo-inverse (a segment
    may be rank deficient)."""
    return np.einsum("kij,kj->ki", np.linalg.pinv(gram, rcond=1e-12, hermitian=True), rhs)


def rel_errors(pred: np.ndarray, obs: np.ndarray) -> np.ndarray:
    return np.abs(pred - obs) / obs


def _figures(pred: np.ndarray, obs: np.ndarray) -> dict[str, float]:
    err = rel_errors(pred, obs)
    sst = float(np.sum((obs - obs.mean()) ** 2))
    sse = float(np.sum((obs - pred) ** 2))
    p50, p90, p99 = (float(v) for v in np.percentile(err, [50, 90, 99]))
    return {"r2": 1.0 - sse / sst if sst > 0 else float("nan"), "rel_err_p50": p50, "rel_err_p90": p90,
            "rel_err_p99": p99}


@dataclass
class PhaseFit:
    """One phase's two-segment fit (coefficients in TERMS order, ns per unit of each feature) and its baseline."""

    steps: int
    breakpoint_tokens: float | None  # a step is in the low segment when sum p <= breakpoint; None: one segment
    lo: np.ndarray
    hi: np.ndarray
    lo_steps: int
    hi_steps: int
    dropped: list[str]
    figures: dict[str, float]
    baseline: np.ndarray  # alpha, gamma
    baseline_figures: dict[str, float]
    fit_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def predict(self, x: np.ndarray) -> np.ndarray:
        hi = x[:, 1] > self.breakpoint_tokens if self.breakpoint_tokens is not None else np.zeros(len(x), bool)
        return np.where(hi, x @ self.hi, x @ self.lo)

    def predict_baseline(self, tokens_sum: np.ndarray) -> np.ndarray:
        return self.baseline[0] + self.baseline[1] * tokens_sum


def fit_phase(x: np.ndarray, y: np.ndarray, grid_points: int = GRID_POINTS,
              min_segment_steps: int = MIN_SEGMENT_STEPS) -> PhaseFit:
    """Fit the two-segment model on steps ``x`` (``design``) with observed latencies ``y`` (ns).

    Candidate breakpoints are up to ``grid_points`` distinct quantiles of sum p leaving at least
    ``min_segment_steps`` steps on each side; each candidate's squared error comes from cumulative normal
    equations over the steps sorted by sum p (one pass, no refit per candidate). With no valid candidate (too few
    steps, or sum p takes one value) both segments are one fit and ``breakpoint_tokens`` is None."""
    t0 = time.perf_counter()
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if n < 2:
        raise RequestsError(f"cannot fit a phase from {n} step(s)")
    keep = _kept_terms(x)
    dropped = [TERMS[j] for j in range(len(TERMS)) if not keep[j]]
    scale = np.abs(x[:, keep]).max(axis=0)
    scale[scale == 0] = 1.0
    xs = x[:, keep] / scale
    order = np.argsort(x[:, 1], kind="stable")
    xs_o, y_o, p_o = xs[order], y[order], x[order, 1]
    # cumulative X'X, X'y, y'y at every prefix
    c_gram = np.cumsum(xs_o[:, :, None] * xs_o[:, None, :], axis=0)
    c_rhs = np.cumsum(xs_o * y_o[:, None], axis=0)
    c_yy = np.cumsum(y_o * y_o)
    def sse_at(cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Valid candidate breakpoints among ``cands`` and the total squared error of each."""
        cut = np.searchsorted(p_o, cands, side="right")  # low segment = the first `cut` sorted steps
        ok = (cut >= min_segment_steps) & (n - cut >= min_segment_steps)
        cands, cut = cands[ok], cut[ok]
        if not len(cut):
            return cands, np.zeros(0)
        g_lo, r_lo, yy_lo = c_gram[cut - 1], c_rhs[cut - 1], c_yy[cut - 1]
        g_hi, r_hi, yy_hi = c_gram[-1] - g_lo, c_rhs[-1] - r_lo, c_yy[-1] - yy_lo
        b_lo, b_hi = _solve(g_lo, r_lo), _solve(g_hi, r_hi)
        # SSE = y'y - 2 b'X'y + b'X'X b (exact for any b)
        sse = (yy_lo - 2 * np.einsum("ki,ki->k", b_lo, r_lo) + np.einsum("ki,kij,kj->k", b_lo, g_lo, b_lo)
               + yy_hi - 2 * np.einsum("ki,ki->k", b_hi, r_hi) + np.einsum("ki,kij,kj->k", b_hi, g_hi, b_hi))
        return cands, sse

    # Coarse grid: quantiles of sum p; then every distinct sum p between the best candidate's grid neighbours.
    values = np.unique(p_o)
    grid = np.unique(np.quantile(p_o, np.linspace(0, 1, grid_points + 2)[1:-1], method="lower"))
    breakpoint: float | None = None
    cands, sse = sse_at(grid)
    if len(cands):
        best = int(np.argmin(sse))
        lo_v = cands[best - 1] if best > 0 else values[0]
        hi_v = cands[best + 1] if best + 1 < len(cands) else values[-1]
        fine, fine_sse = sse_at(values[(values >= lo_v) & (values <= hi_v)])
        if len(fine) and fine_sse.min() <= sse[best]:
            breakpoint = float(fine[int(np.argmin(fine_sse))])
        else:
            breakpoint = float(cands[best])
    # Final coefficients by least squares on each segment's own rows (better conditioned than the normal equations).
    lo_mask = x[:, 1] <= breakpoint if breakpoint is not None else np.ones(n, dtype=bool)
    coefs = []
    for mask in (lo_mask, ~lo_mask) if breakpoint is not None else (lo_mask,):
        c_s, *_ = np.linalg.lstsq(xs[mask], y[mask], rcond=None)
        full = np.zeros(len(TERMS))
        full[keep] = c_s / scale
        coefs.append(full)
    lo = coefs[0]
    hi = coefs[1] if breakpoint is not None else coefs[0]
    fit = PhaseFit(steps=n, breakpoint_tokens=breakpoint, lo=lo, hi=hi, lo_steps=int(lo_mask.sum()),
                   hi_steps=int(n - lo_mask.sum()), dropped=dropped, figures={}, baseline=np.zeros(2),
                   baseline_figures={})
    fit.figures = _figures(fit.predict(x), y)
    bx = np.column_stack([np.ones(n), x[:, 1]])
    bscale = np.abs(bx).max(axis=0)
    bscale[bscale == 0] = 1.0
    bc, *_ = np.linalg.lstsq(bx / bscale, y, rcond=None)
    fit.baseline = bc / bscale
    fit.baseline_figures = _figures(fit.predict_baseline(x[:, 1]), y)
    fit.fit_seconds = time.perf_counter() - t0
    return fit


# --- warehouse -----------------------------------------------------------------------------------------------------
def request_sql_files() -> list[SqlFile]:
    """The statements run after a fit (``sql/requests/*.sql``), in REQUEST_TABLES order."""
    files = {p.stem: parse_sql_file(p) for p in sorted(REQUEST_SQL_DIR.glob("*.sql"))}
    missing = [t for t in REQUEST_TABLES if t not in files]
    if missing:
        raise RequestsError(f"{REQUEST_SQL_DIR}: missing statement(s) {', '.join(missing)}")
    return [files[t] for t in REQUEST_TABLES]


def _has_table(con: Any, name: str) -> bool:
    """A warehouse table, or the view of it in a readers' snapshot (views over the Parquet marts)."""
    return bool(con.execute(
        "SELECT count(*) FROM (SELECT table_name AS n, schema_name, temporary FROM duckdb_tables() UNION ALL "
        "SELECT view_name, schema_name, temporary FROM duckdb_views()) WHERE n = $t AND NOT temporary "
        "AND schema_name = 'main'", {"t": name}).fetchall()[0][0])


FIT_SCHEMA = pa.schema([
    ("model_name", pa.string()), ("gpu_name", pa.string()), ("phase", pa.string()), ("steps_fitted", pa.int64()),
    ("traces", pa.int64()), ("breakpoint_tokens", pa.float64()), ("lo_steps", pa.int64()), ("hi_steps", pa.int64()),
    *[(f"{s}_{t}", pa.float64()) for s in ("lo", "hi") for t in TERMS],
    ("dropped_terms", pa.string()), ("r2", pa.float64()), ("rel_err_p50", pa.float64()),
    ("rel_err_p90", pa.float64()), ("rel_err_p99", pa.float64()), ("baseline_alpha", pa.float64()),
    ("baseline_gamma", pa.float64()), ("baseline_r2", pa.float64()), ("baseline_rel_err_p50", pa.float64()),
    ("baseline_rel_err_p90", pa.float64()), ("baseline_rel_err_p99", pa.float64()), ("fit_seconds", pa.float64()),
    ("fitted_at", pa.timestamp("us", tz="UTC")),
])


def _fit_row(key: tuple[str, str, str], fit: PhaseFit, traces: int, now: datetime) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model_name": key[0], "gpu_name": key[1], "phase": key[2], "steps_fitted": fit.steps, "traces": traces,
        "breakpoint_tokens": fit.breakpoint_tokens, "lo_steps": fit.lo_steps, "hi_steps": fit.hi_steps,
        "dropped_terms": ",".join(fit.dropped), "fit_seconds": fit.fit_seconds, "fitted_at": now,
        "baseline_alpha": float(fit.baseline[0]), "baseline_gamma": float(fit.baseline[1]),
    }
    for seg, coef in (("lo", fit.lo), ("hi", fit.hi)):
        for t, v in zip(TERMS, coef, strict=True):
            row[f"{seg}_{t}"] = float(v)
    row.update(fit.figures)
    row.update({f"baseline_{k}": v for k, v in fit.baseline_figures.items()})
    return row


def stale_groups(con: Any) -> list[tuple[str, str, str]]:
    """(model, GPU, phase) groups whose fit-ready steps in ``serving_steps`` differ in number from the stored fit
    (or have none): the groups new steps arrived for; and fitted groups that no longer have any step."""
    if not _has_table(con, "serving_steps"):
        return []
    fitted = "request_model_fit" if _has_table(con, "request_model_fit") else None
    rows = con.execute(
        "SELECT model_name, gpu_name, phase, count(*) AS n FROM serving_steps WHERE fit_ready GROUP BY ALL"
    ).fetchall()
    have: dict[tuple[str, str, str], int] = {}
    if fitted:
        have = {(m, g, p): n for m, g, p, n in con.execute(
            "SELECT model_name, gpu_name, phase, steps_fitted FROM request_model_fit").fetchall()}
    now = {(m, g, p): n for m, g, p, n in rows}
    changed = {k for k, n in now.items() if have.get(k) != n}
    gone = {k for k in have if k not in now}  # their steps were removed (a trace forgotten): drop the fit
    return sorted(changed | gone)


def refit(con: Any, groups: list[tuple[str, str, str]] | None = None, *, grid_points: int = GRID_POINTS,
          min_segment_steps: int = MIN_SEGMENT_STEPS) -> dict[str, Any]:
    """Fit the model for ``groups`` (default: the stale ones) from the warehouse's ``serving_steps``, replace their
    rows of ``request_model_fit`` (other groups' fits are kept; groups without fit-ready steps lose theirs) and
    rebuild the tables that read it (REQUEST_TABLES). Returns {"fitted": [...], "rows": {table: n}, "seconds": s}."""
    t0 = time.perf_counter()
    if not _has_table(con, "serving_steps"):
        raise RequestsError("the warehouse has no serving_steps table: run `taxbreak analyze` first")
    groups = stale_groups(con) if groups is None else groups
    fitted: list[dict[str, Any]] = []
    now = datetime.now(UTC)
    skipped: list[str] = []
    for key in groups:
        tbl = con.execute(
            "SELECT tokens_sum, context_sum, tokens_sq_sum, batch_requests, latency_ns, trace_id FROM serving_steps "
            "WHERE fit_ready AND model_name = $m AND gpu_name = $g AND phase = $p",
            {"m": key[0], "g": key[1], "p": key[2]}).fetchnumpy()
        n = len(tbl["latency_ns"])
        if n < 2:
            skipped.append(f"{'/'.join(key)}: {n} fit-ready step(s)")
            continue
        cols = [np.asarray(tbl[c], dtype=np.float64)
                for c in ("tokens_sum", "context_sum", "tokens_sq_sum", "batch_requests", "latency_ns")]
        fit = fit_phase(design(*cols[:4]), cols[4], grid_points, min_segment_steps)
        traces = len(np.unique(np.asarray(tbl["trace_id"], dtype=object)))
        fitted.append(_fit_row(key, fit, traces, now))
    rows = pa.Table.from_pylist(fitted, schema=FIT_SCHEMA)
    files = request_sql_files()
    counts: dict[str, int] = {}
    con.register("request_fit_rows", rows)
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            first = files[0]
            con.execute(f"CREATE OR REPLACE TEMP TABLE _new_fit AS {first.text}")
            if _has_table(con, first.name):
                con.execute(
                    "CREATE OR REPLACE TEMP TABLE _old_fit AS SELECT * FROM main.request_model_fit o WHERE NOT EXISTS ("
                    "SELECT 1 FROM (SELECT unnest($k::VARCHAR[][]) AS k) q WHERE q.k[1] = o.model_name AND "
                    "q.k[2] = o.gpu_name AND q.k[3] = o.phase)", {"k": [list(k) for k in groups]})
                con.execute("CREATE OR REPLACE TABLE main.request_model_fit AS SELECT * FROM _old_fit "
                            "UNION ALL BY NAME SELECT * FROM _new_fit")
            else:
                con.execute("CREATE OR REPLACE TABLE main.request_model_fit AS SELECT * FROM _new_fit")
            _comment(con, first)
            counts[first.name] = con.execute("SELECT count(*) FROM main.request_model_fit").fetchone()[0]
            for sf in files[1:]:
                con.execute(f"CREATE OR REPLACE TABLE main.{sf.name} AS {sf.text}")
                _comment(con, sf)
                counts[sf.name] = con.execute(f"SELECT count(*) FROM main.{sf.name}").fetchone()[0]
            con.execute("DROP TABLE IF EXISTS temp._new_fit")
            con.execute("DROP TABLE IF EXISTS temp._old_fit")
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    finally:
        con.unregister("request_fit_rows")
    return {"fitted": [{k: r[k] for k in ("model_name", "gpu_name", "phase", "steps_fitted")} for r in fitted],
            "skipped": skipped, "rows": counts, "seconds": time.perf_counter() - t0}


def _comment(con: Any, sf: SqlFile) -> None:
    def lit(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    con.execute(f"COMMENT ON TABLE main.{sf.name} IS {lit(sf.grain + '. ' + sf.description)}")
    cols = [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = $t AND schema_name = 'main' AND NOT internal "
        "AND database_name = current_database()", {"t": sf.name}).fetchall()]
    for col in cols:
        if col in sf.columns:
            con.execute(f'COMMENT ON COLUMN main.{sf.name}."{col}" IS {lit(sf.columns[col])}')


# --- reading (CLI, report) -----------------------------------------------------------------------------------------
def _rows(con: Any, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def trace_requests(con: Any, trace: str, top: int = 20) -> dict[str, Any]:
    """One trace's attribution as plain data: its steps' fits, per-request totals, per-tenant totals, and the
    fits of the (model, GPU) groups its steps belong to. ``trace``: trace id prefix or file name."""
    if not _has_table(con, "serving_steps"):
        raise LookupError("the warehouse has no serving_steps table: run `taxbreak analyze` first")
    m = con.execute("SELECT trace_id, file_name FROM trace_meta WHERE starts_with(trace_id, $p) OR file_name = $p",
                    {"p": trace}).fetchall()
    if not m:
        raise LookupError(f"no analysed trace matches {trace!r}")
    if len(m) > 1:
        raise LookupError(f"{trace!r} matches {len(m)} traces; give more of the trace id")
    t = m[0][0]
    out: dict[str, Any] = {"trace_id": t, "file_name": m[0][1]}
    out["steps"] = _rows(con, "SELECT composition_source, phase, count(*) AS steps, count(*) FILTER (WHERE fit_ready) "
                              "AS fit_ready_steps, bool_or(has_request_detail) AS has_request_detail, "
                              "sum(batch_requests) AS request_steps, sum(latency_ns) AS latency_ns, "
                              "sum(device_active_ns) AS device_active_ns, sum(t_orchestrate_ns) AS t_orchestrate_ns "
                              "FROM serving_steps WHERE trace_id = $t GROUP BY ALL ORDER BY ALL", {"t": t})
    fitted = _has_table(con, "request_model_fit")
    out["fitted"] = fitted
    if not fitted:
        out.update(fits=[], requests=[], tenants=[], request_count=0)
        return out
    out["fits"] = _rows(con, "SELECT f.* EXCLUDE (fitted_at), CAST(f.fitted_at AS VARCHAR) AS fitted_at "
                             "FROM request_model_fit f WHERE (model_name, gpu_name, phase) IN "
                             "(SELECT (model_name, gpu_name, phase) FROM serving_steps WHERE trace_id = $t) "
                             "ORDER BY phase", {"t": t})
    out["request_count"] = con.execute("SELECT count(*) FROM request_totals WHERE trace_id = $t",
                                       {"t": t}).fetchone()[0]
    out["requests"] = _rows(con, "SELECT * EXCLUDE (trace_id) FROM request_totals WHERE trace_id = $t "
                                 "ORDER BY model_share_ns DESC, request_id LIMIT $k", {"t": t, "k": top})
    out["tenants"] = _rows(con, "SELECT * EXCLUDE (trace_id) FROM request_tenants WHERE trace_id = $t "
                                "ORDER BY model_share_ns DESC, tenant", {"t": t})
    return out


def _ms(ns: float | int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:,.3f} ms"


def _pct(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x:.1%}"


def format_requests(d: dict[str, Any]) -> str:
    lines = [f"trace {d['trace_id'][:16]}  {d['file_name']}: per-request latency attribution (LLMVisor, "
             "docs/method.md)"]
    if not d["steps"]:
        lines.append("  no serving steps: the trace has no vLLM execute_..., SGLang step[...] or sidecar "
                     "steps[].requests[] annotations")
        return "\n".join(lines)
    lines.append("  serving steps:")
    for s in d["steps"]:
        detail = "per request" if s["has_request_detail"] else "per-step sums only (no request ids)"
        lines.append(f"    {s['composition_source']:<13} {s['phase']:<8} {s['steps']:>7,} steps "
                     f"({s['fit_ready_steps']:,} fit-ready), {detail}; latency {_ms(s['latency_ns'])}, device "
                     f"{_ms(s['device_active_ns'])}, T_Orchestrate {_ms(s['t_orchestrate_ns'])}")
    if not d["fitted"]:
        lines.append("  no fitted model in the warehouse: run `taxbreak requests --refit`")
        return "\n".join(lines)
    if not d["fits"]:
        lines.append("  no fitted model for this trace's (model, GPU, phase) groups: a fit needs at least 2 fit-ready "
                     "steps of the group (`taxbreak requests --refit` after more traces arrive)")
    else:
        lines.append("  fitted model T = beta + a1*sum p + a2*sum c + a3*sum p^2 + a4*|B|, two segments per phase "
                     "(ns per unit); token-count baseline alpha + gamma*sum p beside it:")
    for f in d["fits"]:
        bp = "one segment" if f["breakpoint_tokens"] is None else f"breakpoint sum p <= {f['breakpoint_tokens']:,.0f}"
        lines.append(f"    {f['model_name']} on {f['gpu_name']}, {f['phase']}: {f['steps_fitted']:,} steps from "
                     f"{f['traces']} trace(s), {bp}" + (f"; dropped (collinear) {f['dropped_terms']}"
                                                        if f["dropped_terms"] else ""))
        for seg in ("lo", "hi"):
            if seg == "hi" and f["breakpoint_tokens"] is None:
                continue
            lines.append(f"      {seg}: beta {f[seg + '_beta']:,.0f}  a1 {f[seg + '_a1']:,.3f}  "
                         f"a2 {f[seg + '_a2']:,.4f}  a3 {f[seg + '_a3']:,.6f}  a4 {f[seg + '_a4']:,.1f}  "
                         f"({f[seg + '_steps']:,} steps)")
        lines.append(f"      model    R2 {f['r2']:.4f}  rel. error p50 {_pct(f['rel_err_p50'])} p90 "
                     f"{_pct(f['rel_err_p90'])} p99 {_pct(f['rel_err_p99'])}")
        lines.append(f"      baseline R2 {f['baseline_r2']:.4f}  rel. error p50 {_pct(f['baseline_rel_err_p50'])} "
                     f"p90 {_pct(f['baseline_rel_err_p90'])} p99 {_pct(f['baseline_rel_err_p99'])}")
    if not d["request_count"]:
        lines.append("  no per-request shares: the trace's steps give per-step sums only (request ids, tenants and "
                     "per-request tokens are missing; write them into the sidecar, docs/sidecar.md)")
        return "\n".join(lines)
    lines.append(f"  requests ({d['request_count']:,}; top {len(d['requests'])} by modelled latency share; "
                 "orchestration split by the same shares is ours):")
    lines.append(f"    {'request':<14} {'tenant':<10} {'steps':>6} {'prompt':>7} {'out':>5} {'latency share':>14} "
                 f"{'device':>12} {'orchestr.':>12} {'e2e':>12}")
    for r in d["requests"]:
        lines.append(f"    {r['request_id'][:14]:<14} {r['tenant'][:10]:<10} {r['steps']:>6,} "
                     f"{r['prefill_tokens']:>7,} {(r['output_tokens'] or 0):>5,} {_ms(r['model_share_ns']):>14} "
                     f"{_ms(r['device_share_ns']):>12} {_ms(r['orchestration_share_ns']):>12} {_ms(r['e2e_ns']):>12}")
    lines.append("  tenants:")
    for t in d["tenants"]:
        lines.append(f"    {t['tenant'][:20]:<20} {t['requests']:>5,} requests  latency share "
                     f"{_ms(t['model_share_ns'])} ({_pct(t['share_of_trace'])})  device {_ms(t['device_share_ns'])}"
                     f"  orchestration {_ms(t['orchestration_share_ns'])}")
    return "\n".join(lines)


def cmd_requests(args: Any) -> int:
    """``taxbreak requests [TRACE] [--refit] [--json]``."""
    from taxbreak.config import Paths
    from taxbreak.query import open_for_cli

    paths = Paths.from_args(args)
    if not Path(paths.warehouse).exists():
        print(f"requests: no warehouse at {paths.warehouse}: ingest traces and run `taxbreak analyze` first",
              file=sys.stderr)
        return 2
    if args.refit:
        from taxbreak.warehouse import WarehouseBusy, writer

        try:
            # the one writer rule (taxbreak.warehouse): the lock, then the readers' snapshot published after
            with writer(paths.warehouse) as con:
                res = refit(con, None if not args.all else [tuple(r) for r in con.execute(
                    "SELECT DISTINCT model_name, gpu_name, phase FROM serving_steps WHERE fit_ready").fetchall()])
        except (RequestsError, WarehouseBusy) as exc:
            print(f"requests: {paths.warehouse}: {exc}", file=sys.stderr)
            return 2
        for f in res["fitted"]:
            print(f"fitted {f['model_name']} / {f['gpu_name']} / {f['phase']}: {f['steps_fitted']:,} steps",
                  file=sys.stderr)
        for s in res["skipped"]:
            print(f"not fitted: {s}", file=sys.stderr)
        if not res["fitted"] and not res["skipped"]:
            print("every fit is up to date", file=sys.stderr)
        print(f"refit in {res['seconds']:.2f} s", file=sys.stderr)
        if not args.trace:
            return 0
    if not args.trace:
        print("requests: give a TRACE (id prefix or file name), or --refit", file=sys.stderr)
        return 2
    opened = open_for_cli(args, "requests")
    if opened is None:
        return 2
    try:
        d = trace_requests(opened.con, args.trace, top=args.top)
    except LookupError as exc:
        print(f"requests: {opened.path}: {exc}", file=sys.stderr)
        return 2
    finally:
        opened.con.close()
    print(json.dumps(d, indent=2, default=str) if args.json else format_requests(d))
    return 0


def add_requests_parser(sub: Any) -> None:
    from taxbreak.config import add_path_args

    p = sub.add_parser(
        "requests", help="per-request latency attribution of co-batched serving steps (LLMVisor)",
        description="Who paid for each serving step: the fitted step-latency model per (model, GPU, phase) with its "
        "R2 and p50/p90/p99 errors beside the token-count baseline, and each request's and tenant's share of "
        "latency, device time and host orchestration (docs/method.md). --refit fits the (model, GPU) groups that "
        "got new steps since their last fit (needs the warehouse for writing).")
    p.add_argument("trace", nargs="?", help="trace id prefix or file name")
    p.add_argument("--refit", action="store_true", help="refit the stale (model, GPU, phase) groups first")
    p.add_argument("--all", action="store_true", help="with --refit: refit every group, not only the stale ones")
    p.add_argument("--top", type=int, default=20, help="requests listed (default 20)")
    p.add_argument("--json", action="store_true", help="print the data as JSON")
    add_path_args(p, lake=False)
    p.set_defaults(func=cmd_requests)
