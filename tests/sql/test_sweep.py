"""Batch-size sweeps (sweep_points, sweep_transition): hand-computed values; a per-trace run recomputes them."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb

from taxbreak.engine import analysis

from .scenarios import LONE_ID, SWEEP_IDS, build_sweep, sweep_meta, sweep_point_rows, write_trace

TRANSITION_COLS = """sweep_key, model, model_kind, seq_len, phase, points, batch_sizes, min_batch_size, max_batch_size,
    baseline_tklqt_ns, tklqt_threshold_ns, tklqt_transition_batch_size, hdbi_transition_batch_size,
    transitions_agree"""


def test_sweep_points_and_transition(tmp_path: Path) -> None:
    lake = build_sweep(tmp_path / "lake")
    wh = tmp_path / "wh.duckdb"
    counts = analysis.materialize(wh, tmp_path / "lake")
    assert counts["sweep_points"] == 3 and counts["sweep_transition"] == 1
    con = duckdb.connect(str(wh), read_only=True)
    points = con.execute("""SELECT sweep_key, sweep_key_source, trace_id, batch_size, batch_rank, kernels, tklqt_ns,
                            hdbi, hdbi_linked, t_orchestrate_ns, t_device_active_ns, kpt, il_ns, seq_len, phase
                            FROM sweep_points ORDER BY batch_size""").fetchall()
    assert points == [
        ("toy_sweep", "sweep_name", SWEEP_IDS[1], 1, 1, 1, 2000, 1000 / 6000, 1000 / 6000, 5000, 1000, 1.0,
         490 + 2000 + 1000, 4, "decode"),
        ("toy_sweep", "sweep_name", SWEEP_IDS[2], 2, 2, 1, 2200, 3000 / 8000, 3000 / 8000, 5000, 3000, 1.0,
         490 + 2200 + 3000, 4, "decode"),
        ("toy_sweep", "sweep_name", SWEEP_IDS[4], 4, 3, 1, 6000, 7000 / 12000, 7000 / 12000, 5000, 7000, 1.0,
         490 + 6000 + 7000, 4, "decode"),
    ]
    assert con.execute("SELECT count(*) FROM sweep_points WHERE trace_id = $t", {"t": LONE_ID}).fetchone()[0] == 0
    # the lone trace has no sweep name: its key would be model + sequence length, and it has one batch size only
    assert con.execute("SELECT sweep_name, seq_len, batch_size FROM trace_meta WHERE trace_id = $t",
                       {"t": LONE_ID}).fetchall() == [(None, 16, 8)]
    got = con.execute(f"SELECT {TRANSITION_COLS}, hdbi_crossing_batch_size FROM sweep_transition").fetchall()
    assert got[0][:-1] == ("toy_sweep", "toy", "dense", 4, "decode", 3, 3, 1, 4, 2100.0, 2625.0, 4, 4, True)
    assert math.isclose(got[0][-1], 2 ** 1.6, rel_tol=1e-12)
    con.close()

    # The batch-4 trace changes (its TKLQT falls to 2500 <= 2625) and only it is re-analysed: the sweep's rows,
    # which read every trace, are recomputed with the other two points still in them.
    t4 = SWEEP_IDS[4]
    write_trace(lake, t4, sweep_point_rows(t4, 7000, 2500), gpu="NVIDIA H100 80GB HBM3", file_name="toy_bs4.json",
                metadata={"taxbreak": sweep_meta(4)})
    counts = analysis.materialize(wh, tmp_path / "lake", trace_ids=[t4])
    assert counts["sweep_points"] == 3 and counts["sweep_transition"] == 1
    con = duckdb.connect(str(wh), read_only=True)
    assert con.execute("SELECT batch_size, tklqt_ns FROM sweep_points ORDER BY batch_size").fetchall() == [
        (1, 2000), (2, 2200), (4, 2500)]
    got = con.execute(f"SELECT {TRANSITION_COLS} FROM sweep_transition").fetchall()
    assert got == [("toy_sweep", "toy", "dense", 4, "decode", 3, 3, 1, 4, 2100.0, 2625.0, None, 4, False)]
    comment = con.execute("SELECT comment FROM duckdb_tables() WHERE table_name = 'sweep_transition'").fetchone()[0]
    assert comment.startswith("one row per batch-size sweep")
    con.close()


def test_sweep_table_alone_on_a_fresh_connection(tmp_path: Path) -> None:
    """materialize_table for one trace reads the other traces' published rows, not only the run's."""
    build_sweep(tmp_path / "lake")
    wh = tmp_path / "wh.duckdb"
    analysis.materialize(wh, tmp_path / "lake")
    con = analysis.connect(wh)
    try:
        full = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                for t in ("sweep_points", "sweep_transition")}
        assert analysis.materialize_table(con, "sweep_points", trace_ids=[SWEEP_IDS[1]],
                                          lake_root=tmp_path / "lake") == 3
        assert con.execute("SELECT * FROM sweep_points ORDER BY ALL").fetchall() == full["sweep_points"]
        assert analysis.materialize_table(con, "sweep_transition", trace_ids=[SWEEP_IDS[1]],
                                          lake_root=tmp_path / "lake") == 1
        assert con.execute("SELECT * FROM sweep_transition ORDER BY ALL").fetchall() == full["sweep_transition"]
    finally:
        con.close()
