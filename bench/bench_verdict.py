"""The verdict on the public traces: per trace, what bounds it, with what confidence, and the lever to fix first with
the replay's predicted gain (issue 24; docs/method.md "The verdict").

    python bench/bench_verdict.py                      # ../shared/traces/public when present, else the vendored set
    python bench/bench_verdict.py --traces DIR --json out.json

Each trace goes through the same path as the pipeline: ingest into a fresh lake, `taxbreak analyze`, the what-if
replay of the default scenarios (which writes `levers`), then the read model's verdict (what `taxbreak summary`
opens with).  Beside each verdict the HDBI the summary used to lead with, so a disagreement is visible, and the time
the replay took beside the analysis time of all traces (the reference measured in the same run).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces" / "public"
VENDORED = ROOT / "tests" / "data" / "public"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=Path, default=SHARED if SHARED.is_dir() else VENDORED)
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    from taxbreak.cli import main as cli
    from taxbreak.engine import runner
    from taxbreak.features.whatif import compute_and_write
    from taxbreak.read import readmodel
    from taxbreak.store.query import open_readonly

    with tempfile.TemporaryDirectory(prefix="bench_verdict_") as tmp:
        lake, wh = Path(tmp) / "lake", Path(tmp) / "wh" / "taxbreak.duckdb"
        paths = ["--lake", str(lake), "--warehouse", str(wh)]
        cli(["ingest", "-q", str(args.traces), *paths])  # a file that fails (no nsys for a .nsys-rep) is reported
        t0 = time.perf_counter()
        if cli(["analyze", "-q", *paths]) != 0:
            print("bench_verdict: analyze failed", file=sys.stderr)
            return 1
        analyse_s = time.perf_counter() - t0
        opened = open_readonly(wh)
        ids = [r[0] for r in opened.con.execute("SELECT trace_id FROM trace_meta ORDER BY file_name").fetchall()]
        opened.con.close()
        t0 = time.perf_counter()
        runner.publish(wh, lambda con: compute_and_write(con, lake, ids), traces=ids, label="bench_verdict")
        replay_s = time.perf_counter() - t0
        opened = open_readonly(wh)
        try:
            heads = {h["trace_id"]: h for h in readmodel.trace_headlines(opened.con, ids)}
            verdicts = readmodel.verdicts(opened.con, ids)
        finally:
            opened.con.close()

    rows = []
    for tid in ids:
        h, v = heads[tid], verdicts.get(tid)
        top = readmodel.top_levers(v, 1) if v else []
        rows.append({
            "file_name": h["file_name"], "gpu_name": h.get("gpu_name"), "kernels": h.get("kernels"),
            "bound": v["bound"] if v else None, "confidence": v["confidence"] if v else None,
            "busy_share": v.get("busy_share") if v else None, "hdbi": h.get("hdbi"), "hdbi_wall": h.get("hdbi_wall"),
            "disagreement": v.get("disagreement") if v else None,
            "top_lever": top[0]["label"] if top else None,
            "il_change_ns": top[0]["il_change_ns"] if top else None,
            "il_change_pct": top[0]["il_change_pct"] if top else None,
        })
    print(f"traces: {args.traces} ({len(rows)} analysed)")
    print(f"{'trace':<44} {'GPU':<22} {'verdict':<30} {'busy':>5} {'HDBI':>6} {'HDBI_w':>6}  top lever: IL change")
    for r in rows:
        bound = f"{r['bound']} ({r['confidence']})" if r["bound"] else "n/a"
        busy = "n/a" if r["busy_share"] is None else f"{r['busy_share']:.0%}"
        hdbi = "n/a" if r["hdbi"] is None else f"{r['hdbi']:.3f}"
        hw = "n/a" if r["hdbi_wall"] is None else f"{r['hdbi_wall']:.3f}"
        lever = ("none the replay models" if r["top_lever"] is None else
                 f"{r['top_lever']}: {r['il_change_ns'] / 1e6:+.3f} ms ({r['il_change_pct']:+.1f}%)")
        print(f"{r['file_name'][:44]:<44} {(r['gpu_name'] or '?')[:22]:<22} {bound[:30]:<30} {busy:>5} {hdbi:>6} "
              f"{hw:>6}  {lever}" + ("   [HDBI disagrees]" if r["disagreement"] else ""))
    print(f"analysis of all traces {analyse_s:.1f} s (reference); what-if replay + levers {replay_s:.1f} s "
          f"({replay_s / analyse_s:.2f}x the analysis)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "analyse_s": analyse_s, "replay_s": replay_s}, indent=2,
                                        default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
