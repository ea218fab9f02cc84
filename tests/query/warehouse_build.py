"""Builds the small test warehouse shared by tests/query and tests/report (loaded by path from their conftests):
synthetic Nsight SQLite decodes (a dense batch-size sweep 1, 4, 16 and one MoE) plus the public nsys-ai exports
mock.sqlite (2 kernels) and h100_2gpu_1s.sqlite (3442 kernels, SOURCES.md) when ``public`` (the public traces
folder, tests/conftest.py) is given."""

from __future__ import annotations

from pathlib import Path

from taxbreak.capture.synthetic import SyntheticConfig, generate_synthetic, total_kernels
from taxbreak.engine.analysis import materialize
from taxbreak.ingest import Lake, ingest_file

DENSE = {bs: SyntheticConfig(n_layers=2, output_tokens=4, batch_size=bs) for bs in (1, 4, 16)}
MOE = SyntheticConfig(model_kind="moe", n_layers=2, output_tokens=4)


def build(root: Path, public: Path | None) -> dict:
    files = {}
    for bs, cfg in DENSE.items():
        files[f"dense_bs{bs}"] = (generate_synthetic(root / "in", cfg, formats=("sqlite",))[0], cfg)
    files["moe"] = (generate_synthetic(root / "in", MOE, formats=("sqlite",))[0], MOE)
    for key, name in (("mock", "mock.sqlite"), ("h100", "h100_2gpu_1s.sqlite")):
        if public is not None and (public / "nsys-ai" / name).exists():
            files[key] = (public / "nsys-ai" / name, None)
    lake = Lake(root / "lake")
    ids = {}
    for key, (path, _cfg) in files.items():
        res = ingest_file(path, lake)
        assert res.status == "ingested", f"{path}: {res.error}"
        ids[key] = res.trace_id
    warehouse = root / "wh" / "taxbreak.duckdb"
    materialize(warehouse, root / "lake")
    return {
        "warehouse": warehouse, "lake": root / "lake", "ids": ids,
        "configs": {k: cfg for k, (_p, cfg) in files.items()},
        "kernels": {k: total_kernels(cfg) for k, (_p, cfg) in files.items() if cfg is not None},
    }
