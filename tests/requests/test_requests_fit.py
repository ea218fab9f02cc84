"""The two-segment fit, the baseline and the per-request shares on hand-built steps with hand-computed values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import serving_con

from taxbreak.requests import RequestsError, design, fit_phase, refit, stale_groups

LO = np.array([1000.0, 10.0, 2.0, 0.5, 100.0])  # beta, a1, a2, a3, a4
HI = np.array([5000.0, 30.0, 1.0, 0.1, 50.0])


def _steps(n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(1, n + 1)
    tokens = i * 10.0
    batch = 1.0 + i % 7
    ctx = (i * 37.0) % 101
    tokens_sq = tokens * tokens // (1 + i % 3)
    x = design(tokens, ctx, tokens_sq, batch)
    y = np.where(tokens <= 300, x @ LO, x @ HI)
    return x, y


def test_noise_free_two_segments_are_recovered_with_their_breakpoint() -> None:
    x, y = _steps()
    fit = fit_phase(x, y)
    assert fit.breakpoint_tokens == 300.0  # the largest sum p of the low law
    assert (fit.lo_steps, fit.hi_steps) == (30, 30)
    np.testing.assert_allclose(fit.lo, LO, rtol=1e-7)
    np.testing.assert_allclose(fit.hi, HI, rtol=1e-7)
    assert fit.dropped == []
    assert fit.figures["r2"] == pytest.approx(1.0, abs=1e-12)
    assert fit.figures["rel_err_p99"] < 1e-9


def test_decode_collinear_terms_are_dropped_and_the_per_request_cost_lands_in_a1() -> None:
    rng = np.random.default_rng(0)
    b = rng.integers(1, 33, 80).astype(float)
    ctx = rng.integers(0, 40_000, 80).astype(float)
    x = design(b, ctx, b, b)  # decode: p_i = 1, so sum p = sum p^2 = |B|
    y = 5000 + 300 * b + 2 * ctx
    fit = fit_phase(x, y)
    assert fit.dropped == ["a3", "a4"]
    for coef in (fit.lo, fit.hi):
        np.testing.assert_allclose(coef, [5000, 300, 2, 0, 0], rtol=1e-7, atol=1e-6)


def test_token_count_baseline_by_hand() -> None:
    # sum p = 1, 2, 3 with latencies 10, 20, 40: least squares slope 30/2 = 15, intercept 70/3 - 30 = -20/3;
    # predictions 25/3, 70/3, 115/3; relative errors 1/6, 1/6, 1/24 -> median 1/6
    x = design(np.array([1.0, 2, 3]), np.zeros(3), np.array([1.0, 4, 9]), np.ones(3))
    fit = fit_phase(x, np.array([10.0, 20, 40]))
    assert fit.breakpoint_tokens is None  # three steps cannot hold two segments of 15
    assert fit.baseline == pytest.approx([-20 / 3, 15])
    assert fit.baseline_figures["rel_err_p50"] == pytest.approx(1 / 6)
    with pytest.raises(RequestsError, match="1 step"):
        fit_phase(x[:1], np.array([10.0]))


def _law(p: list[int], c: list[int]) -> float:
    return LO[0] + LO[1] * sum(p) + LO[2] * sum(c) + LO[3] * sum(v * v for v in p) + LO[4] * len(p)


def _tables() -> tuple[pa.Table, pa.Table]:
    """40 'mixed' steps following the low law exactly; step 1 holds r1 (p 100, c 0) and r2 (p 2, c 500), step 2
    r1 again (p 2, c 100) beside r3 (p 4, c 7). Even token counts keep every latency a whole number of ns."""
    rng = np.random.default_rng(1)
    comp: list[list[tuple[str, str, int, int]]] = [
        [("r1", "acme", 100, 0), ("r2", "zen", 2, 500)], [("r1", "acme", 2, 100), ("r3", "zen", 4, 7)]]
    for s in range(3, 41):
        comp.append([(f"q{s}-{j}", "zen", 2 * int(rng.integers(1, 200)), int(rng.integers(0, 3000)))
                     for j in range(int(rng.integers(1, 6)))])
    steps, reqs = [], []
    for sid, batch in enumerate(comp, 1):
        p, c = [b[2] for b in batch], [b[3] for b in batch]
        lat = _law(p, c)
        steps.append({"trace_id": "t", "step_id": sid, "model_name": "m", "gpu_name": "g", "phase": "mixed",
                      "step_ts_ns": sid * 100_000, "step_end_ns": sid * 100_000 + int(lat),
                      "batch_requests": len(p), "tokens_sum": sum(p), "tokens_sq_sum": sum(v * v for v in p),
                      "context_sum": sum(c), "latency_ns": int(lat), "device_active_ns": int(lat) // 2,
                      "t_orchestrate_ns": 2 * int(lat), "fit_ready": True})
        reqs += [{"trace_id": "t", "step_id": sid, "request_id": r, "tenant": t, "request_phase": "prefill",
                  "tokens": pp, "context_tokens": cc, "output_tokens": 1} for r, t, pp, cc in batch]
    return pa.Table.from_pylist(steps), pa.Table.from_pylist(reqs)


def test_shares_per_step_request_and_tenant_by_hand() -> None:
    con = serving_con(*_tables())
    assert stale_groups(con) == [("m", "g", "mixed")]
    res = refit(con)
    assert [f["steps_fitted"] for f in res["fitted"]] == [40]
    assert stale_groups(con) == []  # nothing new since the fit
    # step 1: r1 = 10*100 + 2*0 + 0.5*100^2 + (1000 + 100*2)/2 = 6600; r2 = 10*2 + 2*500 + 0.5*4 + 600 = 1622;
    # together 8222 = the step's latency, so the fractions split device time 4111 and T_Orchestrate 16444 alike
    rows = con.execute("SELECT request_id, model_share_ns, latency_share_ns, device_share_ns, orchestration_share_ns "
                       "FROM request_step_shares WHERE step_id = 1 ORDER BY request_id").fetchall()
    assert rows == [("r1", 6600, 6600, 3300, 13200), ("r2", 1622, 1622, 811, 3244)]
    fit = con.execute("SELECT predicted_ns, rel_err FROM request_step_fit WHERE step_id = 1").fetchone()
    assert fit[0] == pytest.approx(8222) and fit[1] == pytest.approx(0, abs=1e-9)
    # r1 over its life: 6600 + (10*2 + 2*100 + 0.5*4 + 600) = 6600 + 822 = 7422; tenant acme is r1 alone
    tot = con.execute("SELECT steps, prefill_tokens, model_share_ns FROM request_totals WHERE request_id = 'r1'")
    assert tot.fetchone() == (2, 102, 7422)
    ten = con.execute("SELECT requests, model_share_ns FROM request_tenants WHERE tenant = 'acme'").fetchone()
    assert ten == (1, 7422)
    # the shares of every step add up to its prediction (within rounding to whole ns per request)
    worst = con.execute("SELECT max(abs(s.total - f.predicted_ns) / f.batch_requests) FROM (SELECT step_id, "
                        "sum(model_share_ns) AS total FROM request_step_shares GROUP BY step_id) s "
                        "JOIN request_step_fit f USING (step_id)").fetchone()[0]
    assert worst <= 0.5 + 1e-9


def test_refit_of_one_group_keeps_the_others() -> None:
    steps, reqs = _tables()
    other = steps.set_column(steps.schema.get_field_index("model_name"), "model_name",
                             pa.array(["m2"] * steps.num_rows))
    con = serving_con(pa.concat_tables([steps, other]), reqs)
    refit(con)
    before = con.execute("SELECT fitted_at FROM request_model_fit WHERE model_name = 'm2'").fetchone()[0]
    con.execute("DELETE FROM serving_steps WHERE model_name = 'm' AND step_id = 40")  # m's steps changed
    assert stale_groups(con) == [("m", "g", "mixed")]
    res = refit(con)
    assert [(f["model_name"], f["steps_fitted"]) for f in res["fitted"]] == [("m", 39)]
    assert con.execute("SELECT fitted_at FROM request_model_fit WHERE model_name = 'm2'").fetchone()[0] == before
    assert con.execute("SELECT count(*) FROM request_model_fit").fetchone()[0] == 2
    con.execute("DELETE FROM serving_steps WHERE model_name = 'm2'")  # m2's trace was forgotten: its fit goes
    assert stale_groups(con) == [("m2", "g", "mixed")]
    refit(con)
    assert con.execute("SELECT model_name FROM request_model_fit").fetchall() == [("m",)]
