"""Per-request latency attribution for co-batched serving steps (LLMVisor; docs/method.md, "Per-request latency
attribution").

A serving engine runs many requests per step, so a step's latency (and its host orchestration) is shared. The
model of a step B with requests i (Jin et al., LLMVisor, arXiv 2608.08382)::

    T(B) = beta + a1 * sum p_i + a2 * sum c_i + a3 * sum p_i^2 + a4 * |B|

p_i: tokens the request processed in the step (its prompt chunk in prefill, 1 in decode); c_i: tokens already in
its KV cache (attended context). It is fitted per (model, GPU) and phase (prefill, decode) by least squares, with
two segments per phase (memory-bound below the breakpoint on sum p, compute-bound above). Ours: the breakpoint is
chosen by grid search on sum p minimising the squared error, each side holding at least max(5, 5% of the phase's
steps); a term that is collinear with an earlier one over the phase's steps (in decode sum p = |B| = sum p^2) is
dropped (its coefficient stored as 0 and named in ``dropped_terms``).

Mixed steps (chunked prefill: prefill chunks and decode requests in one step; ours, docs/method.md) are never
pooled into one feature set: ``T(B) = T_prefill(B_p) + T_decode(B_d) + delta``, each part from its own phase's
model over its own requests, and ``delta`` one constant fitted on the mixed steps' residuals (0 with fewer than
MIXED_MIN_STEPS mixed steps). The phase models are fitted on the pure steps, or, for a phase with fewer pure
steps than PURE_MIN_STEPS or than the mixed steps, jointly on its pure steps and the mixed steps (each round: the
joint phases' breakpoints on their targets, the latency less the other part and delta, then every joint
coefficient and delta in one least squares; until the breakpoints settle); ``fit_basis`` says which.

Each request's share of a step is its own phase's ``a1 p_i + a2 c_i + a3 p_i^2 + (beta + a4 |B_phase|) /
|B_phase|``, scaled by (T_prefill + T_decode + delta) / (T_prefill + T_decode) in a mixed step (delta spread in
proportion to the shares); the shares add up to the step's prediction exactly, and the step's prefill/decode split
is the two parts so scaled. The step's device time and its host orchestration (T_Orchestrate) are split by the
same fractions (the orchestration split is ours). Beside every fit the token-count baseline ``alpha + gamma *
sum p`` is fitted on the same steps (for mixed steps: on the mixed steps), with the same error figures.

Where things live: the per-step sums are the warehouse table ``serving_steps`` (sql/serving_steps.sql); this module
fits (vectorised numpy, cumulative normal equations over the grid) and writes ``request_model_fit`` through
``sql/requests/request_model_fit.sql``; the per-step predictions, the split and the shares are SQL
(``sql/requests/*.sql``), run after each fit by ``refit``.
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

from taxbreak.config import Paths, add_path_args
from taxbreak.engine import plan, runner
from taxbreak.engine.analysis import out_of_memory_names, publication
from taxbreak.engine.plan import SqlFile
from taxbreak.store.query import open_for_cli
from taxbreak.store.tracenames import TraceNotFound, explain_unanalysed, resolve
from taxbreak.store.warehouse import WarehouseBusy

TERMS = ("beta", "a1", "a2", "a3", "a4")
TERM_FEATURES = ("1", "sum p", "sum c", "sum p^2", "|B|")
GRID_POINTS = 128  # coarse candidate breakpoints: quantiles of sum p, refined around the best (ours)
# A breakpoint needs at least max(SEGMENT_MIN_STEPS, SEGMENT_MIN_SHARE x the phase's steps) on each side; with
# fewer steps, one segment (docs/method.md section 8).
SEGMENT_MIN_STEPS = 5
SEGMENT_MIN_SHARE = 0.05
MIXED_MIN_STEPS = 20  # fewer mixed steps than this: the shared constant delta is 0, and the fit says so
# A phase is fitted jointly with the mixed steps when its pure steps are fewer than this or fewer than the mixed
# steps (ours: the mixed steps then hold most of the phase's evidence; a breakpoint placed from few pure steps can
# fall anywhere in a gap between their sums p, and the mixed steps' parts that land in that gap get the wrong
# segment: on the synthetic chunked workload with prefill-first steps, 96 pure prefill steps put the breakpoint at
# 968 tokens (true 1,024) and the mixed steps' R2 at 0.884 against a noise ceiling of 0.954).
PURE_MIN_STEPS = 20
FEW_STEPS_WARNING = 50  # a fit resting on fewer steps than this carries a warning (ours)
JOINT_MAX_ROUNDS = 30  # backfitting rounds of a joint fit at most; it stops when the squared error settles (ours)
JOINT_TOLERANCE = 1e-9  # relative change of the mixed steps' squared error under which a joint fit stops (ours)
PHASES = ("prefill", "decode")
REQUESTS_STAGE = "requests"  # the plan stage of the tables written after a fit (sql/requests/, taxbreak.engine.plan)


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


def segment_min_steps(n: int) -> int:
    """The fewest steps a segment of a phase with ``n`` steps may hold: max(5, 5% of n) (docs/method.md)."""
    return max(SEGMENT_MIN_STEPS, int(np.ceil(SEGMENT_MIN_SHARE * n)))


def fit_phase(x: np.ndarray, y: np.ndarray, grid_points: int = GRID_POINTS,
              min_segment_steps: int | None = None) -> PhaseFit:
    """Fit the two-segment model on steps ``x`` (``design``) with observed latencies ``y`` (ns).

    Candidate breakpoints are up to ``grid_points`` distinct quantiles of sum p leaving at least
    ``min_segment_steps`` steps on each side (default ``segment_min_steps(n)``); each candidate's squared error
    comes from cumulative normal equations over the steps sorted by sum p (one pass, no refit per candidate). With
    no valid candidate (too few steps, or sum p takes one value) both segments are one fit and
    ``breakpoint_tokens`` is None."""
    t0 = time.perf_counter()
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if n < 2:
        raise RequestsError(f"cannot fit a phase from {n} step(s)")
    if min_segment_steps is None:
        min_segment_steps = segment_min_steps(n)
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


def _baseline(tokens_sum: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """The token-count baseline alpha + gamma * sum p by least squares, and its figures."""
    bx = np.column_stack([np.ones(len(y)), tokens_sum])
    bscale = np.abs(bx).max(axis=0)
    bscale[bscale == 0] = 1.0
    bc, *_ = np.linalg.lstsq(bx / bscale, y, rcond=None)
    coef = bc / bscale
    return coef, _figures(coef[0] + coef[1] * tokens_sum, y)


@dataclass
class GroupFit:
    """The fits of one (model, GPU): a model per phase with steps (``phases``; ``basis`` 'pure' or 'joint'), the
    mixed steps' shared constant ``shared_ns`` (delta) with ``notes`` saying why it is 0 when it is, and the
    mixed steps' figures beside their own token-count baseline."""

    phases: dict[str, PhaseFit]
    basis: dict[str, str]
    pure_steps: dict[str, int]
    mixed_steps: int
    shared_ns: float
    notes: dict[str, list[str]]
    mixed_figures: dict[str, float] = field(default_factory=dict)
    mixed_baseline: np.ndarray | None = None
    mixed_baseline_figures: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    fit_seconds: float = 0.0

    def predict_parts(self, xp: np.ndarray, xd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each phase's part of the steps (its own model over its own requests; 0 where the step has none)."""
        parts = []
        for ph, x in (("prefill", xp), ("decode", xd)):
            has = x[:, 4] > 0
            f = self.phases.get(ph)
            parts.append(np.where(has, f.predict(x), 0.0) if f is not None else np.zeros(len(x)))
        return parts[0], parts[1]


def fit_group(xp: np.ndarray, xd: np.ndarray, y: np.ndarray, phase: np.ndarray, grid_points: int = GRID_POINTS,
              min_segment_steps: int | None = None) -> GroupFit:
    """Fit the steps of one (model, GPU) per docs/method.md section 8: ``xp`` / ``xd`` the ``design`` of each
    step's prefill / decode part (its own requests' sums; zeros where it has none), ``y`` the observed latencies,
    ``phase`` 'prefill' / 'decode' / 'mixed' per step.

    A phase with at least max(PURE_MIN_STEPS, mixed steps) pure steps is fitted on them; one with fewer is fitted
    jointly on its pure steps and the mixed steps: each round places its breakpoint by ``fit_phase`` on its target
    (on a mixed step the latency less the other part and delta), then fits every joint coefficient and delta in one
    least squares, until the breakpoints settle. delta is the least-squares constant of the mixed steps' residuals
    (their mean when no phase is joint; 0 with fewer than MIXED_MIN_STEPS of them, or when a joint phase has no pure
    step at all: its intercept and delta are then one constant, kept in the intercept)."""
    t0 = time.perf_counter()
    y = np.asarray(y, dtype=np.float64)
    phase = np.asarray(phase).astype(str)  # fixed-width strings: no Python object per step
    rows = {"prefill": phase == "prefill", "decode": phase == "decode"}
    mixed = phase == "mixed"
    n_mixed = int(mixed.sum())
    xs = {"prefill": xp, "decode": xd}
    pure = {ph: int(rows[ph].sum()) for ph in PHASES}
    notes: dict[str, list[str]] = {"prefill": [], "decode": [], "mixed": []}
    joint = {ph: n_mixed > 0 and pure[ph] < max(PURE_MIN_STEPS, n_mixed) for ph in PHASES}
    basis = {ph: "joint" if joint[ph] else "pure" for ph in PHASES}
    for ph in PHASES:
        if joint[ph]:
            why = f"< {PURE_MIN_STEPS}" if pure[ph] < PURE_MIN_STEPS else "fewer than the mixed steps"
            notes[ph].append(f"fitted jointly with the {n_mixed:,} mixed steps: {pure[ph]:,} pure steps ({why})")
    fits: dict[str, PhaseFit] = {}
    for ph in PHASES:  # the pure fits (the start of a joint one)
        if pure[ph] >= 2:
            fits[ph] = fit_phase(xs[ph][rows[ph]], y[rows[ph]], grid_points, min_segment_steps)
    fix_delta = n_mixed < MIXED_MIN_STEPS or any(joint[ph] and pure[ph] == 0 for ph in PHASES)
    if n_mixed and n_mixed < MIXED_MIN_STEPS:
        notes["mixed"].append(f"delta = 0: {n_mixed:,} mixed steps (< {MIXED_MIN_STEPS})")
    elif n_mixed and fix_delta:
        gone = [ph for ph in PHASES if joint[ph] and pure[ph] == 0]
        notes["mixed"].append(f"delta = 0: no pure {' or '.join(gone)} step, so delta and that phase's intercept "
                              "are one constant (kept in the intercept)")
    delta = 0.0
    gf = GroupFit(fits, basis, pure, n_mixed, 0.0, notes)

    def mixed_parts() -> tuple[np.ndarray, np.ndarray]:
        return gf.predict_parts(xp[mixed], xd[mixed])

    rounds = 0
    if n_mixed and any(joint.values()):
        # Rounds: each joint phase's breakpoint by fit_phase on its target (the latency less the other part and
        # delta on the mixed steps), then every joint coefficient and delta at once by least squares over the
        # joint phases' pure steps and the mixed steps, those breakpoints fixed; until the breakpoints settle.
        jp = [ph for ph in PHASES if joint[ph]]
        sel = mixed.copy()
        for ph in jp:
            sel |= rows[ph]
        last: tuple | None = None
        for rounds in range(1, JOINT_MAX_ROUNDS + 1):  # noqa: B007 - the count is reported
            for ph in jp:
                pp, pd_ = mixed_parts()
                other = pd_ if ph == "prefill" else pp
                xr = np.concatenate([xs[ph][rows[ph]], xs[ph][mixed]])
                yr = np.concatenate([y[rows[ph]], y[mixed] - other - delta])
                fits[ph] = fit_phase(xr, yr, grid_points, min_segment_steps)
            bps = tuple(fits[ph].breakpoint_tokens for ph in jp)
            delta = _joint_solve(fits, jp, xs, y, sel, mixed, gf, fix_delta)
            if bps == last:
                break
            last = bps
    elif n_mixed and not fix_delta and all(ph in fits for ph in PHASES):
        pp, pd_ = mixed_parts()
        delta = float(np.mean(y[mixed] - pp - pd_))
    gf.shared_ns = delta
    gf.rounds = rounds
    if n_mixed >= 2 and all(ph in fits for ph in PHASES):
        pp, pd_ = mixed_parts()
        gf.mixed_figures = _figures(pp + pd_ + delta, y[mixed])
        gf.mixed_baseline, gf.mixed_baseline_figures = _baseline(xp[mixed, 1] + xd[mixed, 1], y[mixed])
    elif n_mixed:
        notes["mixed"].append("not predicted: a phase has no model (fewer than 2 steps of its own)")
    for ph in list(fits):  # a phase's figures and baseline are over its pure steps
        f = fits[ph]
        if pure[ph] >= 2:
            f.figures = _figures(f.predict(xs[ph][rows[ph]]), y[rows[ph]])
            f.baseline, f.baseline_figures = _baseline(xs[ph][rows[ph], 1], y[rows[ph]])
        else:
            f.figures = dict.fromkeys(("r2", "rel_err_p50", "rel_err_p90", "rel_err_p99"), float("nan"))
            f.baseline, f.baseline_figures = np.array([np.nan, np.nan]), dict(f.figures)
    gf.fit_seconds = time.perf_counter() - t0
    return gf


def _joint_solve(fits: dict[str, PhaseFit], jp: list[str], xs: dict[str, np.ndarray], y: np.ndarray,
                 sel: np.ndarray, mixed: np.ndarray, gf: GroupFit, fix_delta: bool) -> float:
    """The joint least squares of a joint fit: over the steps ``sel`` (the joint phases' pure steps and the mixed
    steps), the coefficients of each joint phase's segments (its breakpoint fixed) and delta (unless
    ``fix_delta``), the other phase's part (a pure fit) subtracted from the latency. Writes the coefficients into
    ``fits``; returns delta."""
    target = y[sel].copy()
    for ph in PHASES:
        if ph not in jp and ph in fits:
            x = xs[ph][sel]
            target -= np.where(x[:, 4] > 0, fits[ph].predict(x), 0.0)
    blocks, where = [], []
    for ph in jp:
        x = xs[ph][sel]
        has = x[:, 4] > 0
        f = fits[ph]
        hi = x[:, 1] > f.breakpoint_tokens if f.breakpoint_tokens is not None else np.zeros(len(x), bool)
        for seg, mask in (("lo", has & ~hi), ("hi", has & hi)) if f.breakpoint_tokens is not None else (
                ("lo", has),):
            blocks.append(x * mask[:, None])
            where.append((ph, seg))
    if not fix_delta:
        blocks.append(mixed[sel].astype(np.float64)[:, None])
        where.append(("delta", ""))
    xj = np.hstack(blocks)
    keep = _kept_terms(xj)
    scale = np.abs(xj[:, keep]).max(axis=0)
    scale[scale == 0] = 1.0
    c, *_ = np.linalg.lstsq(xj[:, keep] / scale, target, rcond=None)
    full = np.zeros(xj.shape[1])
    full[keep] = c / scale
    delta, col = 0.0, 0
    for ph, seg in where:
        if ph == "delta":
            delta = float(full[col])
            col += 1
            continue
        coef = full[col:col + len(TERMS)]
        col += len(TERMS)
        if seg == "lo":
            fits[ph].lo = coef.copy()
            if fits[ph].breakpoint_tokens is None:
                fits[ph].hi = coef.copy()
        else:
            fits[ph].hi = coef.copy()
    return delta


# --- warehouse -----------------------------------------------------------------------------------------------------
def request_sql_files() -> list[SqlFile]:
    """The statements run after a fit (the plan's ``requests`` stage, ``sql/requests/*.sql``), in dependency order:
    request_model_fit (over the fit's rows) first, each later one reading the ones before and the serving tables."""
    files = plan.nodes(REQUESTS_STAGE)
    if not files or files[0].name != "request_model_fit":
        raise RequestsError("the plan's requests stage must start with request_model_fit (sql/requests/)")
    return files


def _has_table(con: Any, name: str) -> bool:
    """A warehouse table, or the view of it in a readers' snapshot (views over the Parquet marts)."""
    return bool(con.execute(
        "SELECT count(*) FROM (SELECT table_name AS n, schema_name, temporary FROM duckdb_tables() UNION ALL "
        "SELECT view_name, schema_name, temporary FROM duckdb_views()) WHERE n = $t AND NOT temporary "
        "AND schema_name = 'main'", {"t": name}).fetchall()[0][0])


FIT_SCHEMA = pa.schema([
    ("model_name", pa.string()), ("gpu_name", pa.string()), ("phase", pa.string()), ("fit_basis", pa.string()),
    ("steps_fitted", pa.int64()), ("phase_steps", pa.int64()), ("traces", pa.int64()),
    ("breakpoint_tokens", pa.float64()), ("lo_steps", pa.int64()), ("hi_steps", pa.int64()),
    *[(f"{s}_{t}", pa.float64()) for s in ("lo", "hi") for t in TERMS],
    ("shared_ns", pa.float64()),
    ("dropped_terms", pa.string()), ("r2", pa.float64()), ("rel_err_p50", pa.float64()),
    ("rel_err_p90", pa.float64()), ("rel_err_p99", pa.float64()), ("baseline_alpha", pa.float64()),
    ("baseline_gamma", pa.float64()), ("baseline_r2", pa.float64()), ("baseline_rel_err_p50", pa.float64()),
    ("baseline_rel_err_p90", pa.float64()), ("baseline_rel_err_p99", pa.float64()), ("few_steps", pa.bool_()),
    ("fit_note", pa.string()), ("fit_seconds", pa.float64()), ("fitted_at", pa.timestamp("us", tz="UTC")),
])


def _nan_none(v: float) -> float | None:
    return None if v is None or v != v else float(v)


def _group_rows(key: tuple[str, str], gf: GroupFit, traces: int, now: datetime) -> list[dict[str, Any]]:
    """The request_model_fit rows of one (model, GPU): one per phase model, and one 'mixed' row (delta and the
    mixed steps' figures) when the group has mixed steps."""
    out = []
    for ph, fit in gf.phases.items():
        row: dict[str, Any] = {
            "model_name": key[0], "gpu_name": key[1], "phase": ph, "fit_basis": gf.basis[ph],
            "steps_fitted": fit.steps, "phase_steps": gf.pure_steps[ph], "traces": traces,
            "breakpoint_tokens": fit.breakpoint_tokens, "lo_steps": fit.lo_steps, "hi_steps": fit.hi_steps,
            "shared_ns": None, "dropped_terms": ",".join(fit.dropped), "fit_seconds": gf.fit_seconds,
            "fitted_at": now, "baseline_alpha": _nan_none(fit.baseline[0]),
            "baseline_gamma": _nan_none(fit.baseline[1]), "few_steps": fit.steps < FEW_STEPS_WARNING,
        }
        for seg, coef in (("lo", fit.lo), ("hi", fit.hi)):
            for t, v in zip(TERMS, coef, strict=True):
                row[f"{seg}_{t}"] = float(v)
        row.update({k: _nan_none(v) for k, v in fit.figures.items()})
        row.update({f"baseline_{k}": _nan_none(v) for k, v in fit.baseline_figures.items()})
        note = list(gf.notes[ph])
        if row["few_steps"]:
            note.append(f"rests on {fit.steps:,} steps (< {FEW_STEPS_WARNING})")
        row["fit_note"] = "; ".join(note)
        out.append(row)
    if gf.mixed_steps:
        row = {"model_name": key[0], "gpu_name": key[1], "phase": "mixed", "fit_basis": "composed",
               "steps_fitted": gf.mixed_steps, "phase_steps": gf.mixed_steps, "traces": traces,
               "shared_ns": gf.shared_ns, "dropped_terms": "", "fit_seconds": gf.fit_seconds, "fitted_at": now,
               "few_steps": gf.mixed_steps < FEW_STEPS_WARNING}
        row.update({k: _nan_none(v) for k, v in gf.mixed_figures.items()})
        if gf.mixed_baseline is not None:
            row.update(baseline_alpha=float(gf.mixed_baseline[0]), baseline_gamma=float(gf.mixed_baseline[1]))
        row.update({f"baseline_{k}": _nan_none(v) for k, v in gf.mixed_baseline_figures.items()})
        note = list(gf.notes["mixed"])
        if gf.rounds:
            note.append(f"joint fit in {gf.rounds} rounds (breakpoints, then one least squares)")
        if row["few_steps"]:
            note.append(f"rests on {gf.mixed_steps:,} steps (< {FEW_STEPS_WARNING})")
        row["fit_note"] = "; ".join(note)
        out.append(row)
    return out


def stale_groups(con: Any) -> list[tuple[str, str, str]]:
    """(model, GPU, phase) groups whose fit-ready steps in ``serving_steps`` differ in number from the stored fit
    (``phase_steps``; or have none): the groups new steps arrived for; and fitted groups that no longer have any
    step. A refit refits every phase of their (model, GPU): a mixed step's parts come from the phase models."""
    if not _has_table(con, "serving_steps"):
        return []
    fitted = "request_model_fit" if _has_table(con, "request_model_fit") else None
    rows = con.execute(
        "SELECT model_name, gpu_name, phase, count(*) AS n FROM serving_steps WHERE fit_ready GROUP BY ALL"
    ).fetchall()
    have: dict[tuple[str, str, str], int] = {}
    if fitted:
        cols = {r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'request_model_fit'").fetchall()}
        count = "phase_steps" if "phase_steps" in cols else "NULL"  # a fit stored before issue 26: refit
        have = {(m, g, p): n for m, g, p, n in con.execute(
            f"SELECT model_name, gpu_name, phase, {count} FROM request_model_fit").fetchall()}
    now = {(m, g, p): n for m, g, p, n in rows}
    changed = {k for k, n in now.items() if have.get(k) != n}
    gone = {k for k in have if k not in now}  # their steps were removed (a trace forgotten): drop the fit
    return sorted(changed | gone)


PART_COLUMNS = {ph: (f"{ph}_tokens_sum", f"{ph}_context_sum", f"{ph}_tokens_sq_sum", f"{ph}_requests")
                for ph in PHASES}


STEP_KINDS = ("prefill", "decode", "mixed")  # a fit-ready step's serving_steps.phase, fetched as its place (1-based)


def _fit_pair(con: Any, key: tuple[str, str], now: datetime, skipped: list[str], grid_points: int,
              min_segment_steps: int | None) -> list[dict[str, Any]]:
    """The request_model_fit rows of one (model, GPU) from its fit-ready steps (appends to ``skipped`` what it could
    not fit). A function of its own so that the steps' arrays are gone before the SQL that follows the fit runs: at
    10^6 steps they held ~400 MB beside DuckDB's memory_limit (issue 26); the phase comes as a small code and the
    traces are counted in SQL, not as 10^6 Python strings each."""
    part_cols = [c for ph in PHASES for c in PART_COLUMNS[ph]]
    where = "WHERE fit_ready AND model_name = $m AND gpu_name = $g"
    params = {"m": key[0], "g": key[1]}
    tbl = con.execute(
        f"SELECT coalesce(list_position($k, phase), 0)::TINYINT AS kind, latency_ns, {', '.join(part_cols)} "
        f"FROM serving_steps {where} ORDER BY trace_id, step_id",  # a fixed order: the same steps give the same bits
        {**params, "k": list(STEP_KINDS)}).fetchnumpy()
    n = len(tbl["latency_ns"])
    if n < 2:
        skipped.append(f"{'/'.join(key)}: {n} fit-ready step(s)")
        return []
    xd = {ph: design(*(np.asarray(tbl.pop(c), dtype=np.float64) for c in PART_COLUMNS[ph])) for ph in PHASES}
    phase = np.array(("", *STEP_KINDS))[np.asarray(tbl.pop("kind"), dtype=np.int64)]
    gf = fit_group(xd["prefill"], xd["decode"], np.asarray(tbl.pop("latency_ns"), dtype=np.float64), phase,
                   grid_points, min_segment_steps)
    for ph in PHASES:
        if ph not in gf.phases and gf.pure_steps[ph]:
            skipped.append(f"{'/'.join(key)}/{ph}: {gf.pure_steps[ph]} fit-ready step(s)")
    traces = con.execute(f"SELECT count(DISTINCT trace_id) FROM serving_steps {where}", params).fetchall()[0][0]
    return _group_rows(key, gf, traces, now)


def refit(con: Any, groups: list[tuple[str, ...]] | None = None, *, grid_points: int = GRID_POINTS,
          min_segment_steps: int | None = None) -> dict[str, Any]:
    """Fit the model for the (model, GPU) pairs of ``groups`` ((model, GPU) or (model, GPU, phase) tuples;
    default: the stale ones) from the warehouse's ``serving_steps``, replace their rows of ``request_model_fit``
    (other pairs' fits are kept; pairs without fit-ready steps lose theirs) and rebuild the tables that read it
    (``request_sql_files``). Returns {"fitted": [...], "skipped": [...], "rows": {table: n}, "seconds": s}."""
    t0 = time.perf_counter()
    if not _has_table(con, "serving_steps"):
        raise RequestsError("the warehouse has no serving_steps table: run `taxbreak analyze` first")
    groups = stale_groups(con) if groups is None else groups
    pairs = sorted({(g[0], g[1]) for g in groups})
    fitted: list[dict[str, Any]] = []
    now = datetime.now(UTC)
    skipped: list[str] = []
    for key in pairs:
        with out_of_memory_names(con, "request_model_fit"):  # its steps read from serving_steps
            fitted.extend(_fit_pair(con, key, now, skipped, grid_points, min_segment_steps))
    rows = pa.Table.from_pylist(fitted, schema=FIT_SCHEMA)
    files = request_sql_files()
    counts: dict[str, int] = {}
    con.register("request_fit_rows", rows)
    try:
        with publication(con):  # one transaction; joins the caller's (taxbreak.engine.runner.publish) when there is one
            first = files[0]
            with out_of_memory_names(con, first.name):
                _replace_fit(con, first, pairs)
            plan.comment_on(con, "main.request_model_fit", first)
            counts[first.name] = con.execute("SELECT count(*) FROM main.request_model_fit").fetchone()[0]
            for sf in files[1:]:
                with out_of_memory_names(con, sf.name):
                    con.execute(f"CREATE OR REPLACE TABLE main.{sf.name} AS {sf.text}")
                plan.comment_on(con, f"main.{sf.name}", sf)
                counts[sf.name] = con.execute(f"SELECT count(*) FROM main.{sf.name}").fetchone()[0]
            con.execute("DROP TABLE IF EXISTS temp._new_fit")
            con.execute("DROP TABLE IF EXISTS temp._old_fit")
    finally:
        con.unregister("request_fit_rows")
    return {"fitted": [{k: r[k] for k in ("model_name", "gpu_name", "phase", "fit_basis", "steps_fitted")}
                       for r in fitted],
            "skipped": skipped, "rows": counts, "seconds": time.perf_counter() - t0}


def _replace_fit(con: Any, first: SqlFile, pairs: list[tuple[str, str]]) -> None:
    """main.request_model_fit: the new fits (``request_fit_rows`` through ``first``) and the other pairs' old rows."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _new_fit AS {first.text}")
    if _has_table(con, first.name):
        old_cols = {r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'request_model_fit' "
            "AND schema_name = 'main'").fetchall()}
        keep = ("SELECT * FROM main.request_model_fit o WHERE NOT EXISTS (SELECT 1 FROM (SELECT "
                "unnest($k::VARCHAR[][]) AS k) q WHERE q.k[1] = o.model_name AND q.k[2] = o.gpu_name)")
        if "phase_steps" not in old_cols:  # stored before issue 26: its columns differ, refit all
            keep += " AND false"
        con.execute(f"CREATE OR REPLACE TEMP TABLE _old_fit AS {keep}", {"k": [list(k) for k in pairs]})
        con.execute("CREATE OR REPLACE TABLE main.request_model_fit AS SELECT * FROM _new_fit "
                    "UNION ALL BY NAME SELECT * FROM _old_fit")
    else:
        con.execute("CREATE OR REPLACE TABLE main.request_model_fit AS SELECT * FROM _new_fit")


# --- reading (CLI, report) -----------------------------------------------------------------------------------------
def _rows(con: Any, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


# The fits a trace's steps use: each step kind's own row, and both phase models for a mixed step (its parts).
TRACE_FITS = ("EXISTS (SELECT 1 FROM serving_steps s WHERE s.trace_id = $t AND s.model_name = f.model_name AND "
              "s.gpu_name = f.gpu_name AND (s.phase = f.phase OR s.phase = 'mixed'))")


def step_split(con: Any, trace_id: str) -> list[dict[str, Any]]:
    """One trace's per-step split summed per step kind (docs/method.md section 8; ``request_step_fit``): steps
    predicted, the prediction, its prefill part and decode part (delta spread in proportion to them) and the shared
    constant delta in total (int64 ns), and the prefill fraction of the prediction. The one reader of the split
    (``taxbreak requests`` and the report)."""
    if not _has_table(con, "request_step_fit"):
        return []
    rows = _rows(con, "SELECT phase, count(*) AS steps, sum(predicted_ns)::BIGINT AS predicted_ns, "
                      "sum(prefill_part_ns)::BIGINT AS prefill_part_ns, sum(decode_part_ns)::BIGINT AS decode_part_ns, "
                      "sum(shared_ns)::BIGINT AS shared_ns FROM request_step_fit WHERE trace_id = $t GROUP BY phase "
                      "ORDER BY phase", {"t": trace_id})
    for r in rows:
        r["prefill_fraction"] = r["prefill_part_ns"] / r["predicted_ns"] if r["predicted_ns"] else None
    return rows


def unattributed_steps(con: Any, trace_id: str) -> list[dict[str, Any]]:
    """One trace's serving steps that get no attribution, counted per step kind, source and reason: the step's
    ``unfit_reason`` (what its annotation does not carry), or, for a fit-ready step, that its phase has no fit (no
    refit yet, or fewer than two fit-ready steps of the group). The one reader of it (``taxbreak requests``, the
    report)."""
    if not _has_table(con, "serving_steps"):
        return []
    if _has_table(con, "request_step_fit"):
        no_fit = ("'no fitted model for its phase (a fit needs two fit-ready steps of the (model, GPU, phase); "
                  "a mixed step both phase models)'")
        fitted = ("EXISTS (SELECT 1 FROM request_step_fit f WHERE f.trace_id = s.trace_id AND "
                  "f.step_id = s.step_id)")
    else:
        no_fit, fitted = "'not fitted yet: run `taxbreak requests --refit`'", "false"
    return _rows(con, f"SELECT phase, composition_source, coalesce(unfit_reason, {no_fit}) AS reason, "
                      "count(*) AS steps FROM serving_steps s WHERE trace_id = $t AND (NOT fit_ready OR NOT "
                      f"{fitted}) GROUP BY ALL ORDER BY phase, composition_source, reason", {"t": trace_id})


def trace_requests(con: Any, trace: str, top: int = 20) -> dict[str, Any]:
    """One trace's attribution as plain data: its steps' fits, per-request totals, per-tenant totals, and the
    fits of the (model, GPU) groups its steps belong to. ``trace``: trace id prefix or file name."""
    if not _has_table(con, "serving_steps"):
        raise LookupError("the warehouse has no serving_steps table: run `taxbreak analyze` first")

    names = dict(con.execute("SELECT trace_id, file_name FROM trace_meta").fetchall())
    t = resolve(names.items(), trace, "analysed trace")  # the one resolver (taxbreak.store.tracenames)
    out: dict[str, Any] = {"trace_id": t, "file_name": names[t]}
    out["steps"] = _rows(con, "SELECT composition_source, phase, count(*) AS steps, count(*) FILTER (WHERE fit_ready) "
                              "AS fit_ready_steps, bool_or(has_request_detail) AS has_request_detail, "
                              "sum(batch_requests) AS request_steps, sum(latency_ns) AS latency_ns, "
                              "sum(device_active_ns) AS device_active_ns, sum(t_orchestrate_ns) AS t_orchestrate_ns "
                              "FROM serving_steps WHERE trace_id = $t GROUP BY ALL ORDER BY ALL", {"t": t})
    out["unattributed"] = unattributed_steps(con, t)
    fitted = _has_table(con, "request_model_fit")
    out["fitted"] = fitted
    if not fitted:
        out.update(fits=[], split=[], requests=[], tenants=[], request_count=0)
        return out
    out["fits"] = _rows(con, "SELECT f.* EXCLUDE (fitted_at), CAST(f.fitted_at AS VARCHAR) AS fitted_at "
                             f"FROM request_model_fit f WHERE {TRACE_FITS} ORDER BY phase", {"t": t})
    out["split"] = step_split(con, t)
    out["request_count"] = con.execute("SELECT count(*) FROM request_totals WHERE trace_id = $t",
                                       {"t": t}).fetchone()[0]
    out["requests"] = _rows(con, "SELECT * EXCLUDE (trace_id) FROM request_totals WHERE trace_id = $t "
                                 "ORDER BY model_share_ns DESC NULLS LAST, request_id LIMIT $k", {"t": t, "k": top})
    out["tenants"] = _rows(con, "SELECT * EXCLUDE (trace_id) FROM request_tenants WHERE trace_id = $t "
                                "ORDER BY model_share_ns DESC, tenant", {"t": t})
    return out


def _ms(ns: float | int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:,.3f} ms"


def _pct(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x:.1%}"


def _num(v: Any, fmt: str) -> str:
    """A figure in ``fmt``, or n/a when the fit left it NULL (a jointly fitted or mixed row)."""
    return "n/a" if v is None else format(v, fmt)


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
    if d.get("unattributed"):
        lines.append("  steps without attribution, and why:")
        for u in d["unattributed"]:
            lines.append(f"    {u['phase']:<8} {u['composition_source']:<20} {u['steps']:>7,} steps: {u['reason']}")
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
        if f["phase"] == "mixed":
            bp = "each part from its own phase's model and segment"
        elif f.get("fit_basis"):
            bp += f", fitted on {'the pure steps' if f['fit_basis'] == 'pure' else 'pure and mixed steps jointly'}"
        lines.append(f"    {f['model_name']} on {f['gpu_name']}, {f['phase']}: {f['steps_fitted']:,} steps from "
                     f"{f['traces']} trace(s), {bp}" + (f"; dropped (collinear) {f['dropped_terms']}"
                                                        if f["dropped_terms"] else ""))
        for seg in ("lo", "hi"):
            if seg == "hi" and f["breakpoint_tokens"] is None:
                continue
            if f.get(seg + "_beta") is None:  # the mixed row holds the shared constant, not coefficients
                continue
            lines.append(f"      {seg}: beta {_num(f[seg + '_beta'], ',.0f')}  a1 {_num(f[seg + '_a1'], ',.3f')}  "
                         f"a2 {_num(f[seg + '_a2'], ',.4f')}  a3 {_num(f[seg + '_a3'], ',.6f')}  "
                         f"a4 {_num(f[seg + '_a4'], ',.1f')}  ({_num(f[seg + '_steps'], ',')} steps)")
        if f.get("shared_ns") is not None:
            lines.append(f"      shared cost delta {_num(f['shared_ns'], ',.0f')} ns per mixed step"
                         + (f" ({f['fit_basis']})" if f.get("fit_basis") else ""))
        if f.get("fit_note"):
            lines.append(f"      {'WARNING' if f.get('few_steps') else 'note'}: {f['fit_note']}")
        lines.append(f"      model    R2 {_num(f['r2'], '.4f')}  rel. error p50 {_pct(f['rel_err_p50'])} p90 "
                     f"{_pct(f['rel_err_p90'])} p99 {_pct(f['rel_err_p99'])}")
        lines.append(f"      baseline R2 {_num(f['baseline_r2'], '.4f')}  rel. error p50 "
                     f"{_pct(f['baseline_rel_err_p50'])} "
                     f"p90 {_pct(f['baseline_rel_err_p90'])} p99 {_pct(f['baseline_rel_err_p99'])}")
    if d.get("split"):
        lines.append("  per-step split of the prediction (prefill part + decode part; a mixed step's shared delta "
                     "spread over the two in proportion):")
        for sp in d["split"]:
            lines.append(f"    {sp['phase']:<8} {sp['steps']:>7,} steps  predicted {_ms(sp['predicted_ns'])} = prefill "
                         f"{_ms(sp['prefill_part_ns'])} ({_pct(sp['prefill_fraction'])}) + decode "
                         f"{_ms(sp['decode_part_ns'])}" + (f"; shared delta {_ms(sp['shared_ns'])} in total"
                                                           if sp["phase"] == "mixed" else ""))
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
    unfitted = [r for r in d["requests"] if r["fitted_steps"] < r["steps"]]
    if unfitted:  # their tokens count every step; their shares only the steps with a fit
        lines.append(f"    ({len(unfitted)} of these ran in steps whose phase has no fit (fewer than two fit-ready "
                     "steps): their shares sum only their fitted steps; n/a: none fitted)")
    lines.append("  tenants:")
    for t in d["tenants"]:
        lines.append(f"    {t['tenant'][:20]:<20} {t['requests']:>5,} requests  latency share "
                     f"{_ms(t['model_share_ns'])} ({_pct(t['share_of_trace'])})  device {_ms(t['device_share_ns'])}"
                     f"  orchestration {_ms(t['orchestration_share_ns'])}")
    return "\n".join(lines)


def cmd_requests(args: Any) -> int:
    """``taxbreak requests [TRACE] [--refit] [--json]``."""

    paths = Paths.from_args(args)
    if not Path(paths.warehouse).exists():
        print(f"requests: no warehouse at {paths.warehouse}: ingest traces and run `taxbreak analyze` first",
              file=sys.stderr)
        return 2
    if args.refit:
        def write(con: Any) -> dict[str, Any]:
            return refit(con, None if not args.all else [tuple(r) for r in con.execute(
                "SELECT DISTINCT model_name, gpu_name, phase FROM serving_steps WHERE fit_ready").fetchall()])

        try:
            # the one publisher (taxbreak.engine.runner.publish): the lock, one transaction, then the readers' snapshot
            res = runner.publish(paths, write, label="request_model_fit")
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
        print("requests: give a TRACE (id prefix, file name, stem or unique substring), or --refit", file=sys.stderr)
        return 2
    opened = open_for_cli(args, "requests")
    if opened is None:
        return 2
    try:
        d = trace_requests(opened.con, args.trace, top=args.top)
    except LookupError as exc:
        msg = explain_unanalysed(paths.lake, args.trace, opened.path) if isinstance(exc, TraceNotFound) else (
            f"{opened.path}: {exc}")
        print(f"requests: {msg}", file=sys.stderr)
        return 2
    finally:
        opened.con.close()
    print(json.dumps(d, indent=2, default=str) if args.json else format_requests(d))
    return 0


def add_requests_parser(sub: Any) -> None:
    p = sub.add_parser(
        "requests", help="per-request latency attribution of co-batched serving steps (LLMVisor)",
        description="Who paid for each serving step: the fitted step-latency model per (model, GPU, phase) with its "
        "R2 and p50/p90/p99 errors beside the token-count baseline, and each request's and tenant's share of "
        "latency, device time and host orchestration (docs/method.md). --refit fits the (model, GPU) groups that "
        "got new steps since their last fit (needs the warehouse for writing).")
    p.add_argument("trace", nargs="?", help="trace id prefix, file name, its stem or a unique substring")
    p.add_argument("--refit", action="store_true", help="refit the stale (model, GPU, phase) groups first")
    p.add_argument("--all", action="store_true", help="with --refit: refit every group, not only the stale ones")
    p.add_argument("--top", type=int, default=20, help="requests listed (default 20)")
    p.add_argument("--json", action="store_true", help="print the data as JSON")
    add_path_args(p, lake=False)
    p.set_defaults(func=cmd_requests)
