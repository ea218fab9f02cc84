"""The two-segment fit, the baseline and the per-request shares on hand-built steps with hand-computed values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from requests_support import serving_con

from taxbreak.features.requests import RequestsError, design, fit_phase, refit, stale_groups

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


def _parts(p: list[int], c: list[int], dp: list[int], dc: list[int] | None = None) -> dict[str, int]:
    """serving_steps' per-phase columns of a step with prefill requests (p, c) and decode requests (dp, dc)."""
    dc = dc or []
    return {"prefill_requests": len(p), "prefill_tokens_sum": sum(p), "prefill_tokens_sq_sum": sum(v * v for v in p),
            "prefill_context_sum": sum(c), "decode_requests": len(dp), "decode_tokens_sum": sum(dp),
            "decode_tokens_sq_sum": sum(v * v for v in dp), "decode_context_sum": sum(dc)}


def _tables() -> tuple[pa.Table, pa.Table]:
    """40 prefill steps following the low law exactly; step 1 holds r1 (p 100, c 0) and r2 (p 2, c 500), step 2
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
        steps.append({"trace_id": "t", "step_id": sid, "model_name": "m", "gpu_name": "g", "phase": "prefill",
                      "step_ts_ns": sid * 100_000, "step_end_ns": sid * 100_000 + int(lat),
                      "batch_requests": len(p), "tokens_sum": sum(p), "tokens_sq_sum": sum(v * v for v in p),
                      "context_sum": sum(c), **_parts(p, c, []), "latency_ns": int(lat),
                      "device_active_ns": int(lat) // 2, "t_orchestrate_ns": 2 * int(lat), "fit_ready": True})
        reqs += [{"trace_id": "t", "step_id": sid, "request_id": r, "tenant": t, "request_phase": "prefill",
                  "tokens": pp, "context_tokens": cc, "output_tokens": 1} for r, t, pp, cc in batch]
    return pa.Table.from_pylist(steps), pa.Table.from_pylist(reqs)


def test_shares_per_step_request_and_tenant_by_hand() -> None:
    con = serving_con(*_tables())
    assert stale_groups(con) == [("m", "g", "prefill")]
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
    assert stale_groups(con) == [("m", "g", "prefill")]
    res = refit(con)
    assert [(f["model_name"], f["steps_fitted"]) for f in res["fitted"]] == [("m", 39)]
    assert con.execute("SELECT fitted_at FROM request_model_fit WHERE model_name = 'm2'").fetchone()[0] == before
    assert con.execute("SELECT count(*) FROM request_model_fit").fetchone()[0] == 2
    con.execute("DELETE FROM serving_steps WHERE model_name = 'm2'")  # m2's trace was forgotten: its fit goes
    assert stale_groups(con) == [("m2", "g", "prefill")]
    refit(con)
    assert con.execute("SELECT model_name FROM request_model_fit").fetchall() == [("m",)]


DECODE = (3000.0, 200.0, 1.0)  # beta, per decode request, per cached token
DELTA = -800.0


def _mixed_tables(pure_prefill: list[int]) -> tuple[pa.Table, pa.Table]:
    """Noise-free steps of the composed law (docs/method.md section 8): a prefill step is the LO law over its
    prompts, a decode step 3000 + 200 |B| + 1 sum c, a mixed step the two over its own requests plus DELTA. Step 1
    is mixed: r1 (prefill, p 100, c 0) beside d1 (c 50) and d2 (c 150). ``pure_prefill``: the prompt of each
    pure prefill step's requests."""
    rng = np.random.default_rng(2)
    comp: list[list[tuple[str, str, int, int]]] = [[("r1", "prefill", 100, 0), ("d1", "decode", 1, 50),
                                                    ("d2", "decode", 1, 150)]]
    for s in range(29):  # more mixed steps: prefill chunks of 30..300 tokens beside 1..8 decodes
        comp.append([(f"m{s}-p{j}", "prefill", 2 * int(rng.integers(15, 150)), int(rng.integers(0, 500)))
                     for j in range(int(rng.integers(1, 3)))]
                    + [(f"m{s}-d{j}", "decode", 1, int(rng.integers(10, 4000)))
                       for j in range(int(rng.integers(1, 9)))])
    for s in range(30):  # pure decode steps
        comp.append([(f"d{s}-{j}", "decode", 1, int(rng.integers(10, 4000))) for j in range(int(rng.integers(1, 17)))])
    for s, p in enumerate(pure_prefill):  # 1 to 3 prompts, so that |B| is not the constant
        comp.append([(f"p{s}-{j}", "prefill", p, int(rng.integers(0, 300))) for j in range(1 + s % 3)])
    steps, reqs = [], []
    for sid, batch in enumerate(comp, 1):
        pre = [(b[2], b[3]) for b in batch if b[1] == "prefill"]
        dec = [(b[2], b[3]) for b in batch if b[1] == "decode"]
        lat = 0.0
        if pre:
            lat += _law([p for p, _ in pre], [c for _, c in pre])
        if dec:
            lat += DECODE[0] + DECODE[1] * len(dec) + DECODE[2] * sum(c for _, c in dec)
        if pre and dec:
            lat += DELTA
        phase = "mixed" if pre and dec else "prefill" if pre else "decode"
        p_all, c_all = [b[2] for b in batch], [b[3] for b in batch]
        steps.append({"trace_id": "t", "step_id": sid, "model_name": "m", "gpu_name": "g", "phase": phase,
                      "step_ts_ns": sid * 100_000, "step_end_ns": sid * 100_000 + int(lat),
                      "batch_requests": len(batch), "tokens_sum": sum(p_all),
                      "tokens_sq_sum": sum(v * v for v in p_all), "context_sum": sum(c_all),
                      **_parts([p for p, _ in pre], [c for _, c in pre], [p for p, _ in dec], [c for _, c in dec]),
                      "latency_ns": int(lat), "device_active_ns": int(lat) // 2, "t_orchestrate_ns": 0,
                      "fit_ready": True})
        reqs += [{"trace_id": "t", "step_id": sid, "request_id": r, "tenant": "x", "request_phase": ph,
                  "tokens": pp, "context_tokens": cc, "output_tokens": 1} for r, ph, pp, cc in batch]
    return pa.Table.from_pylist(steps), pa.Table.from_pylist(reqs)


def _check_mixed_step_one(con) -> None:
    # prefill part 1000 + 10*100 + 0.5*100^2 + 100*1 = 7100; decode part 3000 + 200*2 + 1*(50 + 150) = 3600;
    # predicted 7100 + 3600 - 800 = 9900; the -800 spread in proportion: prefill 7100 * 9900 / 10700 = 6569.16,
    # stored as the int64 6569, the decode part what is left of 9900: 3331
    f = con.execute("SELECT prefill_model_ns, decode_model_ns, shared_ns, prefill_part_ns, decode_part_ns, "
                    "predicted_ns, prefill_fraction, split_scale FROM request_step_fit WHERE step_id = 1").fetchone()
    assert f[:6] == (7100, 3600, -800, 6569, 3331, 9900)
    assert f[6:] == pytest.approx((7100 / 10700, 9900 / 10700), rel=1e-6)
    types = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = "
                             "'request_step_fit' AND column_name LIKE '%\\_ns' ESCAPE '\\'").fetchall())
    assert set(types.values()) == {"BIGINT"} and len(types) == 8, types
    # shares: r1 7100, d1 200 + 50 + 3000/2 = 1750, d2 200 + 150 + 1500 = 1850, each x 9900/10700
    rows = con.execute("SELECT request_id, model_share_ns FROM request_step_shares WHERE step_id = 1 "
                       "ORDER BY request_id").fetchall()
    assert rows == [("d1", 1619), ("d2", 1712), ("r1", 6569)]
    worst = con.execute("SELECT max(abs(s.total - f.predicted_ns) / f.batch_requests) FROM (SELECT step_id, "
                        "sum(model_share_ns) AS total FROM request_step_shares GROUP BY step_id) s "
                        "JOIN request_step_fit f USING (step_id)").fetchone()[0]
    assert worst <= 0.5 + 1e-6


def test_mixed_steps_are_two_phase_parts_plus_one_shared_constant() -> None:
    con = serving_con(*_mixed_tables([2 * int(v) for v in np.linspace(10, 250, 30)]))
    refit(con)
    fits = {r[0]: r[1:] for r in con.execute(
        "SELECT phase, fit_basis, phase_steps, shared_ns, r2, rel_err_p99, fit_note FROM request_model_fit").fetchall()}
    assert fits["prefill"][:2] == ("pure", 30) and fits["decode"][:2] == ("pure", 30)
    assert fits["mixed"][:2] == ("composed", 30)
    assert fits["mixed"][2] == pytest.approx(DELTA, abs=1e-3)
    assert fits["mixed"][3] == pytest.approx(1.0, abs=1e-9) and fits["mixed"][4] < 1e-6
    assert "rests on 30 steps" in fits["mixed"][5]  # fewer than FEW_STEPS_WARNING
    _check_mixed_step_one(con)


def test_a_phase_with_few_pure_steps_is_fitted_jointly_with_the_mixed_steps() -> None:
    # 12 pure prefill steps (< PURE_MIN_STEPS = 20): 6 below every mixed chunk, 6 above
    con = serving_con(*_mixed_tables([4, 6, 8, 10, 12, 14, 420, 440, 460, 480, 500, 520]))
    refit(con)
    basis = dict(con.execute("SELECT phase, fit_basis FROM request_model_fit").fetchall())
    assert basis == {"prefill": "joint", "decode": "pure", "mixed": "composed"}
    note, delta = con.execute("SELECT fit_note, shared_ns FROM request_model_fit WHERE phase = 'prefill'").fetchone()
    assert note.startswith("fitted jointly with the 30 mixed steps: 12 pure steps (< 20)") and delta is None
    assert con.execute("SELECT shared_ns FROM request_model_fit WHERE phase = 'mixed'").fetchone()[0] == \
        pytest.approx(DELTA, abs=1e-3)
    _check_mixed_step_one(con)


def test_small_samples_keep_max_5_or_5_percent_per_segment() -> None:
    from taxbreak.features.requests import segment_min_steps

    assert [segment_min_steps(n) for n in (10, 100, 101, 1000)] == [5, 5, 6, 50]
    x, y = _steps(40)  # the high law starts above sum p = 300; move it to above 340: 6 high steps of 40
    y = np.where(x[:, 1] <= 340, x @ LO, x @ HI)
    fit = fit_phase(x, y)
    # a 6-step high segment is allowed (15 per side refused it): the two laws are fitted exactly
    assert fit.breakpoint_tokens is not None and 5 <= fit.hi_steps < 15
    assert fit.figures["rel_err_p99"] < 1e-9
    one = fit_phase(x, y, min_segment_steps=15)
    assert one.hi_steps >= 15 and one.figures["rel_err_p99"] > 1e-3
    fit9 = fit_phase(x[:9], y[:9])
    assert fit9.breakpoint_tokens is None  # 9 steps cannot hold two segments of 5


def test_a_phase_with_fewer_pure_steps_than_mixed_steps_is_fitted_jointly() -> None:
    # 24 pure prefill steps (>= PURE_MIN_STEPS) but fewer than the 30 mixed steps: joint, and the note says why
    con = serving_con(*_mixed_tables([4 + 2 * i for i in range(12)] + [420 + 20 * i for i in range(12)]))
    refit(con)
    basis = dict(con.execute("SELECT phase, fit_basis FROM request_model_fit").fetchall())
    assert basis == {"prefill": "joint", "decode": "pure", "mixed": "composed"}
    note = con.execute("SELECT fit_note FROM request_model_fit WHERE phase = 'prefill'").fetchone()[0]
    assert note.startswith("fitted jointly with the 30 mixed steps: 24 pure steps (fewer than the mixed steps)")
    assert con.execute("SELECT shared_ns FROM request_model_fit WHERE phase = 'mixed'").fetchone()[0] == \
        pytest.approx(DELTA, abs=1e-3)
    _check_mixed_step_one(con)
