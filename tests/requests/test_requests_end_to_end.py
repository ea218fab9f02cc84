"""A synthetic co-batched serving trace through the whole path: Kineto JSON + sidecar -> ingest -> analyze ->
`taxbreak requests --refit` -> `taxbreak requests TRACE [--json]`, and the report section."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from taxbreak.capture.synthetic_serving import ServingConfig, simulate_serving, write_serving_kineto
from taxbreak.cli import main
from taxbreak.engine import analysis
from taxbreak.ingest import Lake, ingest_file
from taxbreak.read import report


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("serving")
    run = simulate_serving(ServingConfig(n_requests=40, policy="separate", seed=3))
    path = write_serving_kineto(run, root / "syn_serving.json.gz")
    lake = Lake(root / "lake")
    assert ingest_file(path, lake).status == "ingested"
    analysis.materialize(root / "wh.duckdb", lake.root)
    return root / "wh.duckdb", run


def test_steps_and_requests_match_the_sidecar(built) -> None:
    wh, run = built
    con = duckdb.connect(str(wh), read_only=True)
    steps = con.execute("SELECT step_id, batch_requests, tokens_sum, latency_ns, device_active_ns, kernels, phase "
                        "FROM serving_steps ORDER BY step_id").fetchall()
    assert len(steps) == len(run.steps)
    for (sid, b, tok, lat, dev, k, phase), batch, lat_true, ph in zip(steps, run.steps, run.latency_ns, run.phases,
                                                                      strict=True):
        assert (b, tok, lat, k, phase) == (len(batch), sum(e["tokens"] for e in batch), lat_true, 3, ph), sid
        work = max(3, int(lat_true * 0.8) - 12_000)  # the writer's three kernels take 55/40/5 % of the work
        assert dev == sum(max(1, int(work * f)) for f in (0.55, 0.40, 0.05)), sid
    assert con.execute("SELECT count(*) FROM serving_step_requests").fetchone()[0] == sum(len(b) for b in run.steps)
    con.close()


def test_cli_refit_then_table_and_json(built, capsys: pytest.CaptureFixture[str]) -> None:
    wh, run = built
    assert main(["requests", "--refit", "--warehouse", str(wh)]) == 0
    assert "fitted synthetic-serving-dense / NVIDIA H100 80GB HBM3 / decode" in capsys.readouterr().err
    assert main(["requests", "--refit", "--warehouse", str(wh)]) == 0
    assert "every fit is up to date" in capsys.readouterr().err
    assert main(["requests", "syn_serving.json.gz", "--warehouse", str(wh), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["request_count"] == 40
    assert sorted(f["phase"] for f in d["fits"]) == ["decode", "prefill"]
    assert sum(t["share_of_trace"] for t in d["tenants"]) == pytest.approx(1.0)
    assert sum(t["requests"] for t in d["tenants"]) == 40
    con = duckdb.connect(str(wh), read_only=True)
    total = con.execute("SELECT sum(predicted_ns) FROM request_step_fit").fetchone()[0]
    shares = con.execute("SELECT sum(model_share_ns) FROM request_totals").fetchone()[0]
    rows = con.execute("SELECT count(*) FROM request_step_shares").fetchone()[0]
    assert abs(shares - total) <= rows * 0.5  # the shares add up to the predictions (whole ns per request)
    data = report.collect(con)
    con.close()
    html = report.render_html(data)
    assert "Per-request latency attribution" in html and "Fitted vs observed step latency" in html
    assert main(["requests", "syn_serving.json.gz", "--warehouse", str(wh)]) == 0
    out = capsys.readouterr().out
    assert "requests (40; top 20" in out and "tenants:" in out and "baseline R2" in out


def test_mixed_trace_shows_the_split_and_both_phase_models(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A chunked-prefill trace: `requests` lists the two phase models its mixed steps use and the mixed row, and
    the per-step split, whose parts add up to the predictions (int64 ns) in the text, the JSON and the report."""
    run = simulate_serving(ServingConfig(n_requests=60, policy="chunked", seed=5, arrivals_per_step=0.5))
    assert "mixed" in run.phases
    lake = Lake(tmp_path / "lake")
    assert ingest_file(write_serving_kineto(run, tmp_path / "chunked.json.gz"), lake).status == "ingested"
    wh = tmp_path / "wh.duckdb"
    analysis.materialize(wh, lake.root)
    assert main(["requests", "--refit", "--warehouse", str(wh)]) == 0
    capsys.readouterr()
    assert main(["requests", "chunked", "--warehouse", str(wh), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {f["phase"] for f in d["fits"]} == {"prefill", "decode", "mixed"}
    split = {r["phase"]: r for r in d["split"]}
    n_mixed = sum(p == "mixed" for p in run.phases)
    assert split["mixed"]["steps"] == n_mixed
    con = duckdb.connect(str(wh), read_only=True)
    got = con.execute("SELECT sum(prefill_part_ns), sum(decode_part_ns), sum(predicted_ns), sum(shared_ns) "
                      "FROM request_step_fit WHERE phase = 'mixed'").fetchone()
    delta = con.execute("SELECT shared_ns FROM request_model_fit WHERE phase = 'mixed'").fetchone()[0]
    data = report.collect(con)
    con.close()
    m = split["mixed"]
    assert (m["prefill_part_ns"], m["decode_part_ns"], m["predicted_ns"], m["shared_ns"]) == got
    assert m["prefill_part_ns"] + m["decode_part_ns"] == m["predicted_ns"]
    assert m["shared_ns"] == n_mixed * round(delta)
    assert split["decode"]["prefill_part_ns"] == 0 and split["decode"]["prefill_fraction"] == 0
    assert main(["requests", "chunked", "--warehouse", str(wh)]) == 0
    out = capsys.readouterr().out
    assert "per-step split of the prediction" in out and "each part from its own phase's model" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("mixed") and "predicted" in x)
    assert f"{n_mixed:>7,} steps" in line and "shared delta" in line
    html = report.render_html(data)
    assert "Step error against batch size" in html and "prefill part" in html


def test_cli_errors_name_the_problem(built, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh, _ = built
    assert main(["requests", "no-such-trace", "--warehouse", str(wh)]) == 2
    assert "no trace matches 'no-such-trace'" in capsys.readouterr().err
    assert main(["requests", "x", "--warehouse", str(tmp_path / "none.duckdb")]) == 2
    assert "no warehouse at" in capsys.readouterr().err


def test_prompt_tokens_survive_an_unfitted_prefill_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """All requests arrive at once: one prefill step, too few for the prefill phase to be fitted (a phase needs two
    fit-ready steps). The requests' prompt tokens still count (issue 29: `requests` printed `prompt 0` for a
    request of 633 prompt tokens, because the totals summed only fitted steps); their shares cover the decode steps."""
    run = simulate_serving(ServingConfig(n_requests=3, policy="separate", seed=3, arrivals_per_step=100.0))
    prompts: dict[str, int] = {}
    for batch in run.steps:
        for e in batch:
            if e["phase"] == "prefill":
                prompts[e["request_id"]] = prompts.get(e["request_id"], 0) + e["tokens"]
    assert sum(1 for b in run.steps if any(e["phase"] == "prefill" for e in b)) == 1 and len(prompts) == 3
    lake = Lake(tmp_path / "lake")
    assert ingest_file(write_serving_kineto(run, tmp_path / "burst.json.gz"), lake).status == "ingested"
    wh = tmp_path / "wh.duckdb"
    analysis.materialize(wh, lake.root)
    assert main(["requests", "--refit", "--warehouse", str(wh)]) == 0
    assert "not fitted: synthetic-serving-dense/NVIDIA H100 80GB HBM3/prefill: 1 fit-ready step(s)" in (
        capsys.readouterr().err)
    assert main(["requests", "burst", "--warehouse", str(wh), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    got = {r["request_id"]: r for r in d["requests"]}
    assert {k: r["prefill_tokens"] for k, r in got.items()} == prompts and all(v > 0 for v in prompts.values())
    steps_of = {k: sum(1 for b in run.steps for e in b if e["request_id"] == k) for k in prompts}
    assert {k: (r["steps"], r["fitted_steps"]) for k, r in got.items()} == {k: (n, n - 1) for k, n in steps_of.items()}
    con = duckdb.connect(str(wh), read_only=True)  # the shares: the decode steps' predictions, whole
    predicted = con.execute("SELECT sum(predicted_ns) FROM request_step_fit").fetchone()[0]
    con.close()
    assert abs(sum(r["model_share_ns"] for r in got.values()) - predicted) <= sum(r["fitted_steps"] for r in
                                                                                   got.values()) * 0.5
    assert sum(t["prefill_tokens"] for t in d["tenants"]) == sum(prompts.values())
    assert main(["requests", "burst", "--warehouse", str(wh)]) == 0
    out = capsys.readouterr().out
    biggest = max(prompts, key=prompts.get)
    row = next(line for line in out.splitlines() if line.strip().startswith(biggest))
    assert f" {prompts[biggest]:>7,} " in row  # the prompt column
    assert "3 of these ran in steps whose phase has no fit" in out


@pytest.mark.parametrize("where", ["_fit_pair", "_replace_fit"])
def test_refit_out_of_memory_is_one_line_and_keeps_the_fits(built, where: str, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """DuckDB running out of memory in the fit's read of serving_steps or in its publication is the analysis's one
    line naming the table (not a traceback), exit 1, and the stored fits stay as they were."""
    from taxbreak.features import requests as feature

    wh, _ = built
    assert main(["requests", "--refit", "--all", "--warehouse", str(wh)]) == 0  # fits to keep
    capsys.readouterr()

    def fits() -> list[tuple]:
        con = duckdb.connect(str(wh), read_only=True)
        try:
            return con.execute("SELECT * FROM request_model_fit ORDER BY ALL").fetchall()
        finally:
            con.close()

    before = fits()
    assert before

    def failing(*_args: object) -> None:
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block of size 256.0 KiB "
                                          "(488.2 MiB/488.2 MiB used)")

    monkeypatch.setattr(feature, where, failing)
    monkeypatch.setenv("TAXBREAK_DUCKDB_MEMORY", "512MB")
    assert main(["requests", "--refit", "--all", "--warehouse", str(wh)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert err == ("taxbreak requests: request_model_fit: DuckDB ran out of memory at memory_limit 488.2 MiB (Out of "
                   "Memory Error: could not allocate block of size 256.0 KiB (488.2 MiB/488.2 MiB used)); nothing of "
                   "this run was published. Set analysis.duckdb_memory ($TAXBREAK_DUCKDB_MEMORY) to another size and "
                   "run it again: lower where it was raised (the analysis spills to disk beyond it), higher where the "
                   "machine has memory to spare"), err
    assert fits() == before
