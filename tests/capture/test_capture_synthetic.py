"""The synthetic workload generator: exact counts in Kineto JSON and Nsight SQLite, labels, seeded determinism.

Hand counts (see the module docstring of taxbreak.capture.synthetic):
- dense layer: RMSNorm 6 + q/k/v 3 + cat 2 + attention 1 + o 1 + add 1 + RMSNorm 6 + MLP 5 + add 1 = 26 kernels;
  per step + embedding 1 + final RMSNorm 6 + LM head 1 + argmax 1 = 9.
- MoE layer: 14 (attention block) + 6 (RMSNorm) + 7 (router) + 1 ``where`` per expert + 8 per active expert + 1.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from taxbreak.capture.profile import sidecar_path
from taxbreak.capture.synthetic import (
    SYNTHETIC_TABLES,
    Dist,
    SyntheticConfig,
    generate_synthetic,
    kernels_per_step,
    nsys_ddl,
    total_kernels,
)
from taxbreak.ingest.nsys_schema import EXPORT_DDL_2026

DENSE = SyntheticConfig(model_kind="dense", n_layers=3, batch_size=1, prompt_len=16, output_tokens=4, seed=7)
# prefill: active experts = min(4, top_k 2 * 1 * 8 tokens) = 4; decode: min(4, 2 * 1) = 2
MOE = SyntheticConfig(model_kind="moe", n_layers=2, batch_size=1, prompt_len=8, output_tokens=3, n_experts=4,
                      top_k=2, seed=7)


def _kineto(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def test_hand_counted_kernels_per_step() -> None:
    assert kernels_per_step(DENSE, "prefill") == kernels_per_step(DENSE, "decode") == 26 * 3 + 9 == 87
    assert total_kernels(DENSE) == 4 * 87 == 348
    assert kernels_per_step(MOE, "prefill") == (28 + 4 + 8 * 4) * 2 + 9 == 137
    assert kernels_per_step(MOE, "decode") == (28 + 4 + 8 * 2) * 2 + 9 == 105
    assert total_kernels(MOE) == 137 + 2 * 105 == 347


def test_dense_kineto_exact_counts_and_links(tmp_path: Path) -> None:
    (path,) = generate_synthetic(tmp_path, DENSE, ("kineto",))
    assert path.name == "synthetic_dense_L3_bs1_sl16_m4.json.gz"
    ev = _kineto(path)["traceEvents"]
    cats = Counter(e.get("cat") for e in ev)
    names = Counter((e.get("cat"), e["name"]) for e in ev)
    assert cats["kernel"] == cats["cpu_op"] == 348
    # 7 cuBLAS GEMMs per layer (q, k, v, o, gate, up, down) + the LM head, launched through the driver
    assert names[("cuda_driver", "cuLaunchKernel")] == 4 * (7 * 3 + 1) == 88
    assert names[("cuda_runtime", "cudaLaunchKernel")] == 348 - 88
    # one token copy + sync per step
    assert names[("cuda_runtime", "cudaMemcpyAsync")] == names[("cuda_runtime", "cudaStreamSynchronize")] == 4
    assert cats["gpu_memcpy"] == 4
    flows = Counter(e["ph"] for e in ev if e.get("cat") == "ac2g")
    assert flows == {"s": 348 + 4, "f": 348 + 4}
    ann = Counter(e["name"] for e in ev if e.get("cat") == "user_annotation")
    assert ann == {"ProfilerStep#1": 1, "prefill": 1, "decode_step#1": 1, "decode_step#2": 1, "decode_step#3": 1}
    # every kernel: a launch with its correlation id and a cpu_op with its External id, launched before it starts
    launches = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    ops = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op"}
    kernels = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: Decimal(str(e["ts"])))
    prev_end = Decimal(0)
    for k in kernels:
        launch = launches[k["args"]["correlation"]]
        op = ops[k["args"]["External id"]]
        assert launch["args"]["External id"] == k["args"]["External id"]
        assert Decimal(str(op["ts"])) <= Decimal(str(launch["ts"])) < Decimal(str(k["ts"]))
        assert Decimal(str(k["ts"])) >= prev_end  # one stream: no overlap
        prev_end = Decimal(str(k["ts"])) + Decimal(str(k["dur"]))
    gemms = [k for k in kernels if launches[k["args"]["correlation"]]["name"] == "cuLaunchKernel"]
    assert all(k["name"].startswith("sm90_xmma_gemm") or "cutlass" in k["name"] for k in gemms)


def test_moe_kineto_and_sqlite_exact_counts(tmp_path: Path) -> None:
    js, db = generate_synthetic(tmp_path, MOE, ("kineto", "sqlite"))
    ev = _kineto(js)["traceEvents"]
    assert sum(1 for e in ev if e.get("cat") == "kernel") == 347
    # torch.where (nonzero) syncs: 4 experts x 2 layers + the token copy = 9 per step, 3 steps
    assert sum(1 for e in ev if e.get("cat") == "gpu_memcpy") == 27
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        assert one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == 347
        assert one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == 27
        # launches 347 + (memcpy + sync) 27 each
        assert one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME") == 347 + 2 * 27
        assert one(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId AND k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000) "
            "WHERE r.start < k.start"
        ) == 347
        assert one(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
            "WHERE s.value = 'cudaLaunchKernel_v7000'"
        ) + one(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
            "WHERE s.value = 'cuLaunchKernel' AND r.eventClass = 1"
        ) == 347
        # emit_nvtx-style op ranges, one per kernel, plus the step annotations and ProfilerStep#1
        assert one("SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'aten::%, op_id = %'") == 347
        assert [r[0] for r in con.execute(
            "SELECT text FROM NVTX_EVENTS WHERE text NOT LIKE 'aten::%' ORDER BY start, text"
        )] == ["ProfilerStep#1", "prefill", "decode_step#1", "decode_step#2"]
        assert one("SELECT name FROM TARGET_INFO_GPU") == MOE.gpu_name
        meta = json.loads(one("SELECT value FROM META_DATA_EXPORT WHERE name = 'TAXBREAK_META'"))
        assert one("SELECT value FROM META_DATA_EXPORT WHERE name = 'TAXBREAK_SYNTHETIC'") == "true"
    finally:
        con.close()
    assert meta == json.loads(sidecar_path(db).read_text()) == _kineto(js)["taxbreak"]
    assert meta["synthetic"] is True and meta["model_kind"] == "moe" and meta["output_tokens"] == 3
    assert [s["name"] for s in meta["steps"]] == ["prefill", "decode_step#1", "decode_step#2"]


def test_cuda_graph_decode_steps(tmp_path: Path) -> None:
    cfg = SyntheticConfig(model_kind="dense", n_layers=2, output_tokens=3, cuda_graphs=True, seed=1)
    (path,) = generate_synthetic(tmp_path, cfg, ("kineto",))
    assert path.name.startswith("synthetic_") and path.name.endswith("_graphs.json.gz")
    ev = _kineto(path)["traceEvents"]
    graph = [e for e in ev if e.get("name") == "cudaGraphLaunch"]
    assert len(graph) == 2  # one per decode step
    per_graph = Counter(e["args"]["correlation"] for e in ev if e.get("cat") == "kernel")
    assert [per_graph[g["args"]["correlation"]] for g in graph] == [26 * 2 + 9] * 2
    assert sum(per_graph.values()) == 3 * 61
    assert sum(1 for e in ev if e.get("cat") == "cpu_op") == 61 + 2  # eager prefill + the token copy per replay


def test_seeded_determinism(tmp_path: Path) -> None:
    a = generate_synthetic(tmp_path / "a", MOE, ("kineto", "sqlite"))
    b = generate_synthetic(tmp_path / "b", MOE, ("kineto", "sqlite"))
    for x, y in zip(a, b, strict=True):
        assert x.read_bytes() == y.read_bytes()
    other = SyntheticConfig(**{**MOE.__dict__, "seed": 8})
    (c,) = generate_synthetic(tmp_path / "c", other, ("kineto",))
    assert c.read_bytes() != a[0].read_bytes()


def test_timestamps_are_exact_microsecond_text(tmp_path: Path) -> None:
    cfg = SyntheticConfig(model_kind="dense", n_layers=1, output_tokens=2,
                          launch_latency=Dist.parse("fixed:4321"), dispatch=Dist.parse("fixed:1000"),
                          launch_api=Dist.parse("fixed:3000"), python_gap=Dist.parse("fixed:500"),
                          library=Dist.parse("fixed:0"), kernel_jitter=Dist.parse("fixed:1000"))
    (path,) = generate_synthetic(tmp_path, cfg, ("kineto",), gzip_json=False)
    text = path.read_text()
    first = json.loads(text)["traceEvents"]
    k = next(e for e in first if e.get("cat") == "kernel")
    launch = next(e for e in first if e.get("cat") == "cuda_runtime" and e["args"]["correlation"] ==
                  k["args"]["correlation"])
    # the first kernel starts on an idle GPU exactly launch_latency after its launch call
    assert '"ts": 3600000010.000' in text  # the embedding op: 10 us after the simulated trace start
    assert (Decimal(str(k["ts"])) - Decimal(str(launch["ts"]))) * 1000 == 4321


def test_dist_parse() -> None:
    assert Dist.parse("fixed:4500") == Dist("fixed", 4500.0, 0.0)
    assert Dist.parse("lognormal:5500:0.25") == Dist("lognormal", 5500.0, 0.25)
    assert str(Dist.parse("uniform:1000:2000")) == "uniform:1000:2000"
    with pytest.raises(ValueError, match="bad distribution"):
        Dist.parse("gamma:1")


def test_synthetic_sqlite_ingests(tmp_path: Path) -> None:
    from taxbreak.ingest import Lake, ingest_file

    (db,) = generate_synthetic(tmp_path, MOE, ("sqlite",))
    res = ingest_file(db, Lake(tmp_path / "lake"))
    assert res.status == "ingested", res.error
    counts = json.loads(res.row["event_counts_json"])
    assert counts["kernel"] == 347 and counts["memcpy"] == 27
    assert json.loads(res.row["gpu_names_json"]) == [MOE.gpu_name]


def test_ddl_is_the_real_export_schema(public_trace: Callable[[str], Path]) -> None:
    """The DDL the synthetic writer (and the adapter's fixtures) use equals the public exports' own, blanks folded."""
    mock, h100 = public_trace("nsys-ai/mock.sqlite"), public_trace("nsys-ai/h100_2gpu_1s.sqlite")

    def fold(sql: str) -> str:
        return re.sub(r"\s+", " ", sql).strip()

    real: dict[str, str] = {}
    for src in (mock, h100):  # TARGET_INFO_GPU is only in mock.sqlite (2026.1); the newer file wins otherwise
        con = sqlite3.connect(f"file:{src.resolve()}?mode=ro&immutable=1", uri=True)
        try:
            real.update(con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall())
        finally:
            con.close()
    assert set(nsys_ddl()) == set(SYNTHETIC_TABLES)
    for t in SYNTHETIC_TABLES:
        assert fold(EXPORT_DDL_2026[t]) == fold(real[t]), t


def test_capture_package_and_synthetic_work_without_torch(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises ImportError
        "import taxbreak.capture, taxbreak.capture.cli, taxbreak.capture.profile, taxbreak.capture.sweep\n"
        "import taxbreak.capture.null_kernel\n"
        "from taxbreak.cli import main\n"
        f"rc = main(['capture', 'synthetic', '--layers', '1', '--tokens', '2', '--out', {str(tmp_path)!r}])\n"
        "assert rc == 0, rc\n"
        f"rc = main(['capture', 'generate', '--out', {str(tmp_path / 'x.json')!r}])\n"
        "assert rc == 2, rc\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "torch is not installed" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "synthetic_dense_L1_bs1_sl128_m2.json.gz", "synthetic_dense_L1_bs1_sl128_m2.json.gz.meta.json"]


def test_synthetic_null_kernel_floor(tmp_path: Path) -> None:
    from taxbreak.cli import main

    assert main(["capture", "synthetic", "--null-kernel", "--launch-latency", "fixed:4321", "--gpu-name",
                 "NVIDIA H200", "--out", str(tmp_path)]) == 0
    path = tmp_path / "synthetic_null_kernel_NVIDIA-H200.json.gz"
    doc = _kineto(path)
    meta = json.loads(sidecar_path(path).read_text())
    assert meta == doc["taxbreak"]
    assert (meta["kind"], meta["synthetic"], meta["gpu_name"]) == ("null_kernel", True, "NVIDIA H200")
    ev = doc["traceEvents"]
    marks = {e["name"]: e for e in ev if e.get("cat") == "user_annotation"}
    assert sorted(marks) == ["null_kernel_measure", "null_kernel_warmup"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    assert len(kernels) == 70 and all(k["args"]["grid"] == [1, 1, 1] == k["args"]["block"] for k in kernels)
    launches = {e["args"]["correlation"]: e for e in ev if e.get("name") == "cudaLaunchKernel"}
    m = marks["null_kernel_measure"]
    measured = [k for k in kernels if Decimal(str(m["ts"])) <= Decimal(str(k["ts"]))
                <= Decimal(str(m["ts"])) + Decimal(str(m["dur"]))]
    assert len(measured) == 50
    assert {(Decimal(str(k["ts"])) - Decimal(str(launches[k["args"]["correlation"]]["ts"]))) * 1000
            for k in kernels} == {4321}
    assert sum(1 for e in ev if e.get("name") == "cudaDeviceSynchronize") == 70


def test_synthetic_null_kernel_is_the_floor_in_the_warehouse(tmp_path: Path) -> None:
    import duckdb

    from taxbreak.capture.synthetic import write_null_kernel
    from taxbreak.engine import analysis
    from taxbreak.ingest import Lake, ingest_file

    path = write_null_kernel(tmp_path / "in" / "synthetic_null_kernel_H200.json.gz", gpu_name="NVIDIA H200",
                             launch_latency=Dist.parse("fixed:4321"))
    res = ingest_file(path, Lake(tmp_path / "lake"))
    assert res.status == "ingested", res.error
    analysis.materialize(tmp_path / "w.duckdb", tmp_path / "lake")
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        row = con.execute("SELECT gpu_name, samples, t_sys_mean_ns, t_sys_min_ns, t_sys_max_ns "
                          "FROM launch_floor_measurements").fetchall()
    finally:
        con.close()
    assert row == [("NVIDIA H200", 50, 4321, 4321, 4321)]
