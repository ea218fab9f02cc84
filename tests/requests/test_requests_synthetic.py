"""Ground truth: on synthetic co-batched workloads with known per-request costs, the attribution recovers each
request's cost within 5% and the fitted model beats the token-count baseline on p90 and p99 error."""

from __future__ import annotations

import numpy as np
import pytest
from requests_support import serving_con

from taxbreak.capture.synthetic_serving import ServedRequest as Req
from taxbreak.capture.synthetic_serving import (
    ServingConfig,
    make_requests,
    run_tables,
    schedule,
    simulate_serving,
    step_truth_table,
)
from taxbreak.features.requests import refit


def test_scheduler_by_hand() -> None:
    # budget 8 tokens, chunked: step 1 prefills a (5) and 3 of b's 6; step 2 decodes a (ctx 5) and prefills b's
    # last 3 (ctx 3, emits b's first token); step 3 decodes a (ctx 6, its 3rd and last token) and b (ctx 6)
    steps = list(schedule([Req("a", "t", 5, 3), Req("b", "t", 6, 2)], max_batch_tokens=8, policy="chunked"))
    got = [[(e["request_id"], e["phase"], e["tokens"], e["context_tokens"], e["output_tokens"]) for e in s]
           for s in steps]
    assert got == [[("a", "prefill", 5, 0, 1), ("b", "prefill", 3, 0, 0)],
                   [("a", "decode", 1, 5, 1), ("b", "prefill", 3, 3, 1)],
                   [("a", "decode", 1, 6, 1), ("b", "decode", 1, 6, 1)]]
    # separate: prefill and decode never share a step
    sep = list(schedule([Req("a", "t", 5, 3), Req("b", "t", 6, 2, arrival_step=1)], policy="separate"))
    assert [{e["phase"] for e in s} for s in sep] == [{"prefill"}, {"decode"}, {"prefill"}, {"decode"}]
    # every request emits exactly its output length
    reqs = make_requests(ServingConfig(n_requests=50, seed=4))
    out: dict[str, int] = {}
    for s in schedule(reqs, max_batch_tokens=256, policy="chunked"):
        for e in s:
            out[e["request_id"]] = out.get(e["request_id"], 0) + e["output_tokens"]
    assert out == {r.request_id: r.output_len for r in reqs}


@pytest.mark.parametrize("policy", ["separate", "chunked"])
def test_shares_within_5_percent_of_the_known_costs_and_fit_beats_baseline(policy: str) -> None:
    run = simulate_serving(ServingConfig(n_requests=800, policy=policy, arrivals_per_step=0.3, seed=7))
    steps, reqs, truth = run_tables(run)
    con = serving_con(steps, reqs)
    refit(con)
    con.register("truth", truth)
    per_request = con.execute(
        "SELECT quantile_cont(abs(t.model_share_ns - tc.cost) / tc.cost, 0.99), max(abs(t.model_share_ns - tc.cost) "
        "/ tc.cost) FROM request_totals t JOIN (SELECT request_id, sum(true_cost_ns) AS cost FROM truth GROUP BY ALL) "
        "tc USING (request_id)").fetchone()
    assert per_request[0] < 0.05, per_request
    # the phases with enough steps of their own to judge (chunked batching leaves a few prefill-only steps when
    # nothing decodes: its prefill model is fitted jointly with the mixed steps, and judged through them)
    fits = con.execute("SELECT phase, rel_err_p90, rel_err_p99, baseline_rel_err_p90, baseline_rel_err_p99, "
                       "breakpoint_tokens FROM request_model_fit WHERE phase_steps >= 200 ORDER BY phase").fetchall()
    assert [f[0] for f in fits] == (["decode", "prefill"] if policy == "separate" else ["decode", "mixed"])
    for phase, p90, p99, b90, b99, bp in fits:
        assert p90 < b90 and p99 < b99, (phase, p90, p99, b90, b99)
        if phase == "mixed":  # no breakpoint of its own: its parts come from the phase models
            continue
        truth_bp = run.cfg.truth[phase].breakpoint_tokens
        lo, hi = con.execute("SELECT count(*) FILTER (WHERE tokens_sum <= $b), count(*) FILTER (WHERE tokens_sum > $b) "
                             "FROM serving_steps WHERE phase = $p", {"b": truth_bp, "p": phase}).fetchone()
        if min(lo, hi) >= 100:  # both segments well covered: the grid search finds the true breakpoint
            assert abs(bp - truth_bp) <= max(1, 0.05 * truth_bp), (phase, bp)


@pytest.mark.parametrize("every", [0, 8])
def test_mixed_steps_split_and_shares_against_the_generator_truth(every: int) -> None:
    # chunked prefill: about a quarter of the steps mixed; every=0 leaves one pure prefill step (the prefill model is
    # fitted jointly), every=8 adds prefill-first steps, still fewer than the mixed steps (joint as well)
    run = simulate_serving(ServingConfig(n_requests=800, policy="chunked", arrivals_per_step=0.3, seed=7,
                                         prefill_only_every=every))
    steps, reqs, truth = run_tables(run)
    con = serving_con(steps, reqs)
    refit(con)
    con.register("truth", truth)
    con.register("step_truth", step_truth_table(run))
    mixed = sum(p == "mixed" for p in run.phases)
    assert mixed >= 0.2 * len(run.phases)
    assert con.execute("SELECT fit_basis FROM request_model_fit WHERE phase = 'prefill'").fetchone()[0] == "joint"
    # the per-step split: the prefill fraction of each mixed step within 5 points of the truth at p90
    split90, n = con.execute(
        "SELECT quantile_cont(abs(f.prefill_fraction - t.true_prefill_fraction), 0.9), count(*) "
        "FROM request_step_fit f JOIN step_truth t USING (trace_id, step_id) WHERE f.phase = 'mixed'").fetchone()
    assert n == mixed and split90 < 0.05, split90
    # the split's int64 parts add up to the prediction in every step
    assert con.execute("SELECT count(*) FROM request_step_fit WHERE prefill_part_ns + decode_part_ns <> predicted_ns "
                       "OR prefill_model_ns + decode_model_ns + shared_ns <> predicted_ns").fetchone()[0] == 0
    # the step against its known cost (noise-free): R2 >= 0.99 and p90 <= 3% on the mixed steps
    y, p = (np.asarray(v, dtype=float) for v in con.execute(
        "SELECT t.cost, f.predicted_ns FROM request_step_fit f JOIN (SELECT step_id, sum(true_cost_ns) AS cost FROM "
        "truth GROUP BY ALL) t USING (step_id) WHERE f.phase = 'mixed'").fetchnumpy().values())
    assert 1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2) >= 0.99
    assert np.percentile(np.abs(p - y) / y, 90) <= 0.03
    # each request's share of each step within 5% of its known cost at p90, in every step kind
    per_kind = dict(con.execute(
        "SELECT f.phase, quantile_cont(abs(s.model_share_ns - t.true_cost_ns) / t.true_cost_ns, 0.9) "
        "FROM request_step_shares s JOIN truth t USING (trace_id, step_id, request_id) JOIN request_step_fit f "
        "USING (trace_id, step_id) GROUP BY ALL").fetchall())
    assert set(per_kind) >= {"decode", "mixed"} and max(per_kind.values()) < 0.05, per_kind
