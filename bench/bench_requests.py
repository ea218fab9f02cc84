"""Per-request latency attribution (docs/method.md, "Per-request latency attribution"): accuracy on synthetic
co-batched workloads with known per-request costs, and the time to fit and attribute ~100,000 steps.

    .venv/bin/python bench/bench_requests.py [--steps 100000] [--seed 0]

For each scheduling policy (separate: prefill/decode steps, SGLang-like; chunked: mixed steps, vLLM-like) it
simulates a workload of about --steps steps (SYNTHETIC: step latency = the sum of known per-request costs times
2% lognormal noise), loads it into an in-memory DuckDB shaped like the warehouse, runs
``taxbreak.features.requests.refit``
(numpy fit + the SQL attribution) and prints:

- the time of the fit and of the attribution, beside a reference measured in the same run: the same grid search
  done naively (one least-squares solve per candidate breakpoint and segment instead of cumulative normal equations);
- per phase: R2 and p50/p90/p99 relative step-latency error of the model and of the token-count baseline;
- per request (over its life) and per request per step: the relative error of the attributed cost against the
  known cost, and the same for a baseline attribution (gamma * p_i + alpha / |B|, the baseline's own additive split);
- per phase fitted on its pure steps, whether the true breakpoint is within reach of section 8's minimum of
  max(5, 5% of the phase's steps) per side, and when it is not, the largest breakpoint allowed and, for
  comparison only, the same fit with 5 steps per side (the decode phase of the chunked workloads: issue 26);
- PASS/FAIL for the issue's targets: per-request shares within 5% of the known costs (p99 over requests), the fit
  beating the baseline on p90 and p99 error in every phase with at least 1,000 steps, 100,000 steps in seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from taxbreak.capture.synthetic_serving import (  # noqa: E402
    ServingConfig,
    run_tables,
    simulate_serving,
    step_truth_table,
)
from taxbreak.features.requests import (  # noqa: E402
    GRID_POINTS,
    SEGMENT_MIN_STEPS,
    design,
    fit_phase,
    refit,
    segment_min_steps,
)

STEPS_PER_REQUEST = 3.3  # steps per request of the default workload at arrivals 0.3 (measured, for sizing)


def naive_grid_seconds(x: np.ndarray, y: np.ndarray) -> float:
    """The reference: the same candidates as ``fit_phase`` (the coarse quantile grid, then every distinct sum p
    between the best candidate's neighbours), each scored by one lstsq per segment."""
    t0 = time.perf_counter()
    p = x[:, 1]
    min_steps = segment_min_steps(len(p))  # the rule fit_phase applies (docs/method.md section 8)

    def sse(cands: np.ndarray) -> list[tuple[float, float]]:
        out = []
        for b in cands:
            lo = p <= b
            if lo.sum() < min_steps or (~lo).sum() < min_steps:
                continue
            total = 0.0
            for m in (lo, ~lo):
                c, *_ = np.linalg.lstsq(x[m], y[m], rcond=None)
                total += float(np.sum((x[m] @ c - y[m]) ** 2))
            out.append((total, float(b)))
        return out

    grid = np.unique(np.quantile(p, np.linspace(0, 1, GRID_POINTS + 2)[1:-1], method="lower"))
    coarse = sse(grid)
    if coarse:
        bs = [b for _, b in coarse]
        k = bs.index(min(coarse)[1])
        lo_v, hi_v = (bs[k - 1] if k else p.min()), (bs[k + 1] if k + 1 < len(bs) else p.max())
        values = np.unique(p)
        sse(values[(values >= lo_v) & (values <= hi_v)])
    return time.perf_counter() - t0


def q(v: np.ndarray) -> str:
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return f"p50 {p50:6.2%}  p90 {p90:6.2%}  p99 {p99:6.2%}  max {v.max():7.2%}"


def r2(pred: np.ndarray, obs: np.ndarray) -> float:
    sst = float(np.sum((obs - obs.mean()) ** 2))
    return 1.0 - float(np.sum((obs - pred) ** 2)) / sst if sst > 0 else float("nan")


def pcts(v: np.ndarray) -> tuple[float, float, float]:
    p50, p90, p99 = (float(x) for x in np.percentile(v, [50, 90, 99]))
    return p50, p90, p99


def figs(pred: np.ndarray, obs: np.ndarray) -> str:
    e50, e90, e99 = pcts(np.abs(pred - obs) / obs)
    return f"R2 {r2(pred, obs):.4f}  error p50 {e50:6.2%} p90 {e90:6.2%} p99 {e99:6.2%}"


WORKLOADS = (  # (label, policy, prefill_only_every)
    ("separate", "separate", 0),  # SGLang-like: pure prefill and decode steps
    ("chunked", "chunked", 0),  # vLLM-like chunked prefill: mixed steps, almost no pure prefill step
    ("chunked+prefill-first", "chunked", 8),  # every 8th step with prompts prefills them alone
)


def reach(con: duckdb.DuckDBPyConnection, phase: str, true_bp: int) -> None:
    """Whether the true breakpoint is one docs/method.md section 8 lets a pure fit choose: the steps of the phase on
    each side of it against the minimum max(5, 5% of the phase's steps); when it is not, the largest one allowed and,
    for comparison only (not section 8), the same fit with 5 steps per side."""
    a = con.execute("SELECT s.tokens_sum, s.context_sum, s.tokens_sq_sum, s.batch_requests, s.latency_ns, t.cost "
                    "FROM serving_steps s JOIN (SELECT trace_id, step_id, sum(true_cost_ns) AS cost FROM truth "
                    "GROUP BY ALL) t USING (trace_id, step_id) WHERE s.phase = $p AND s.fit_ready ORDER BY s.step_id",
                    {"p": phase}).fetchnumpy()
    x = design(*(np.asarray(a[c], dtype=float) for c in ("tokens_sum", "context_sum", "tokens_sq_sum",
                                                          "batch_requests")))
    y, t = np.asarray(a["latency_ns"], dtype=float), np.asarray(a["cost"], dtype=float)
    need = segment_min_steps(len(y))
    above = int((x[:, 1] > true_bp).sum())
    side = min(above, len(y) - above)
    if side >= need:
        print(f"    true breakpoint {true_bp:,} within reach: {above:,} of {len(y):,} steps above it (section 8 "
              f"minimum {need:,} per side)")
        return
    allowed = np.unique(x[:, 1])
    allowed = allowed[[need <= int((x[:, 1] <= v).sum()) <= len(y) - need for v in allowed]]
    free = fit_phase(x, y, min_segment_steps=SEGMENT_MIN_STEPS)
    largest = f"{allowed.max():,.0f}" if len(allowed) else "none"
    print(f"    true breakpoint {true_bp:,} out of reach under section 8: {above:,} of {len(y):,} steps above it, "
          f"fewer than max(5, 5%) = {need:,} per side; the largest breakpoint allowed is "
          f"{largest}. Not section 8, for comparison: {SEGMENT_MIN_STEPS} steps per side -> breakpoint "
          f"{free.breakpoint_tokens:,.0f}, R2 vs truth {r2(free.predict(x), t):.4f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000, help="steps per workload (approximate; default 100000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", type=float, default=0.02, help="lognormal sigma of the step latency (default 0.02)")
    args = ap.parse_args(argv)
    ok = True
    print(f"SYNTHETIC workloads (known per-request costs; nothing measured); step latency = known cost x lognormal "
          f"noise sigma {args.noise:.3f}")
    print("Figures against the observed (noisy) latency are bounded by the noise: the 'ceiling' is the TRUE model's "
          "own R2 and error on the same noisy steps. The targets are judged against the known truth (noise-free).")
    for label, policy, every in WORKLOADS:
        t0 = time.perf_counter()
        cfg = ServingConfig(n_requests=max(10, int(args.steps / STEPS_PER_REQUEST)), policy=policy,
                            arrivals_per_step=0.3, seed=args.seed, noise_sigma=args.noise,
                            prefill_only_every=every)
        run = simulate_serving(cfg)
        steps, reqs, truth = run_tables(run)
        gen_s = time.perf_counter() - t0
        con = duckdb.connect()
        for name, tbl in (("serving_steps", steps), ("serving_step_requests", reqs), ("truth", truth),
                          ("step_truth", step_truth_table(run))):
            con.register("_t", tbl)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM _t")
            con.unregister("_t")
        res = refit(con)
        fit_s = float(con.execute("SELECT max(fit_seconds) FROM request_model_fit").fetchone()[0])
        total_s = res["seconds"]
        big = con.execute("SELECT phase FROM serving_steps GROUP BY phase ORDER BY count(*) DESC LIMIT 1").fetchone()[0]
        arr = con.execute("SELECT tokens_sum, context_sum, tokens_sq_sum, batch_requests, latency_ns "
                          "FROM serving_steps WHERE phase = $p", {"p": big}).fetchnumpy()
        xb = design(*(np.asarray(arr[c], dtype=float) for c in ("tokens_sum", "context_sum", "tokens_sq_sum",
                                                                "batch_requests")))
        yb = np.asarray(arr["latency_ns"], dtype=float)
        ours_big = fit_phase(xb, yb).fit_seconds
        naive_big = naive_grid_seconds(xb, yb)
        kinds = dict(con.execute("SELECT phase, count(*) FROM serving_steps GROUP BY phase").fetchall())
        mixed_share = kinds.get("mixed", 0) / steps.num_rows
        print(f"\n== workload {label} (policy {policy}, prefill-first every {every or 'never'}): {steps.num_rows:,} "
              f"steps ({', '.join(f'{k} {v:,}' for k, v in sorted(kinds.items()))}; mixed {mixed_share:.1%}), "
              f"{reqs.num_rows:,} request-steps, {cfg.n_requests:,} requests (simulated in {gen_s:.1f} s)")
        print(f"  fit + attribute: {total_s:.2f} s (fit {fit_s:.2f} s, attribution SQL {total_s - fit_s:.2f} s)")
        print(f"  reference, phase {big} ({len(yb):,} steps): breakpoint search by cumulative normal equations "
              f"{ours_big:.3f} s (whole fit) vs one lstsq per candidate and segment {naive_big:.3f} s (search only)")
        fits = {r[0]: r[1:] for r in con.execute(
            "SELECT phase, fit_basis, steps_fitted, breakpoint_tokens, shared_ns, fit_note FROM request_model_fit"
        ).fetchall()}
        d = con.execute(
            "SELECT f.phase, f.latency_ns::DOUBLE AS y, f.predicted_ns::DOUBLE AS p, "
            "f.baseline_predicted_ns::DOUBLE AS b, t.cost::DOUBLE AS t, f.prefill_fraction AS pf, "
            "st.true_prefill_fraction AS tpf FROM request_step_fit f JOIN (SELECT trace_id, step_id, "
            "sum(true_cost_ns) AS cost FROM truth GROUP BY ALL) t USING (trace_id, step_id) "
            "JOIN step_truth st USING (trace_id, step_id)").fetchnumpy()
        sh = con.execute(
            "SELECT f.phase, abs(s.model_share_ns - t.true_cost_ns) / t.true_cost_ns AS e FROM request_step_shares s "
            "JOIN truth t USING (trace_id, step_id, request_id) JOIN request_step_fit f USING (trace_id, step_id)"
        ).fetchnumpy()
        for ph in ("prefill", "decode", "mixed"):
            if ph not in fits:
                continue
            basis, n_fit, bp, delta, note = fits[ph]
            m = d["phase"] == ph
            y, p, b, t = (np.asarray(d[k], dtype=float)[m] for k in ("y", "p", "b", "t"))
            if ph == "mixed":
                where = f"prefill part + decode part + delta {delta:,.0f} ns (true {cfg.mixed_shared_ns:,.0f})"
            else:
                where = (f"{basis} fit on {n_fit:,} steps, breakpoint {bp if bp is None else f'{bp:,.0f}'} "
                         f"(true {cfg.truth[ph].breakpoint_tokens:,})")
            print(f"  {ph:<8} {int(m.sum()):>7,} steps  {where}" + (f"; {note}" if note else ""))
            if m.sum() < 2:
                print("    too few steps of this kind to judge")
                continue
            print(f"    vs observed  model    {figs(p, y)}")
            print(f"    vs observed  ceiling  {figs(t, y)}  (the true model on the noisy steps)")
            print(f"    vs observed  baseline {figs(b, y)}")
            print(f"    vs truth     model    {figs(p, t)}")
            print(f"    vs truth     baseline {figs(b, t)}")
            e_m, e_b = np.abs(p - t) / t, np.abs(b - t) / t
            m90, m99 = pcts(e_m)[1:]
            b90, b99 = pcts(e_b)[1:]
            se = np.asarray(sh["e"], dtype=float)[np.asarray(sh["phase"]) == ph]
            print(f"    per request per step, share vs known cost: {q(se)}")
            if ph == "mixed":
                split = np.abs(np.asarray(d["pf"], dtype=float)[m] - np.asarray(d["tpf"], dtype=float)[m]) * 100
                s50, s90, s99 = pcts(split)
                print(f"    prefill/decode split vs truth (points of the step): p50 {s50:.2f} p90 {s90:.2f} "
                      f"p99 {s99:.2f}")
            if m.sum() < 200:  # too few to hold a target to
                continue
            checks = [(m90 < b90 and m99 < b99, f"beats the baseline at p90 and p99 vs truth ({b90 / m90:.1f}x / "
                                                f"{b99 / m99:.1f}x lower error)"),
                      (float(np.percentile(se, 90)) <= 0.05, "per-request share error p90 <= 5%")]
            r2t = r2(p, t)
            if ph == "mixed":
                checks += [(r2t >= 0.99 and m90 <= 0.03, f"R2 vs truth {r2t:.4f} >= 0.99, step error p90 "
                                                          f"{m90:.2%} <= 3%"),
                           (s90 <= 5.0, f"split within 5 points at p90 ({s90:.2f})")]
            else:
                checks.append((r2t >= 0.999, f"R2 vs truth {r2t:.4f} >= 0.999"))
                if basis == "pure":
                    reach(con, ph, cfg.truth[ph].breakpoint_tokens)
            for good, what in checks:
                ok &= good
                print(f"    {'PASS' if good else 'FAIL'}: {what}")
        per_req = con.execute(
            "SELECT t.model_share_ns, tc.cost FROM request_totals t JOIN (SELECT request_id, sum(true_cost_ns) AS "
            "cost FROM truth GROUP BY ALL) tc USING (request_id)").fetchnumpy()
        share, cost = (np.asarray(per_req[k], dtype=float) for k in ("model_share_ns", "cost"))
        print(f"  per request (life), model share vs known cost: {q(np.abs(share - cost) / cost)}")
        fast = total_s < 60 * steps.num_rows / 100_000
        ok &= fast
        print(f"  {'PASS' if fast else 'FAIL'}: fit + attribution of {steps.num_rows:,} steps in {total_s:.2f} s "
              "(target: seconds, not minutes)")
        con.close()
    print("\nall targets met" if ok else "\nSOME TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
