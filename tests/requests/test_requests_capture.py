"""The serving loop: packed co-batched steps compute what each request alone would, and a profiled run writes
the step annotations and the sidecar's per-step requests that serving_steps reads."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the serving loop needs torch (pip install 'taxbreak[capture]')")

from taxbreak.capture.models import ModelConfig, build_model  # noqa: E402
from taxbreak.capture.profile import CaptureError  # noqa: E402
from taxbreak.capture.serving import _ReqState, capture_serving, packed_step  # noqa: E402
from taxbreak.ingest.sidecar import read_sidecar, sidecar_path  # noqa: E402


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_packed_step_equals_each_request_alone(kind: str) -> None:
    m = build_model(ModelConfig(kind=kind))
    g = torch.Generator().manual_seed(0)
    pa_, pb = torch.randint(0, 256, (10,), generator=g), torch.randint(0, 256, (7,), generator=g)
    with torch.inference_mode():
        alone = [m(p.view(1, -1), m.new_cache())[0, -1] for p in (pa_, pb)]
        sa, sb = _ReqState(2, pa_), _ReqState(2, pb)
        packed_step(m, [(sa, pa_[:6])])  # a's first prompt chunk alone
        both = packed_step(m, [(sa, pa_[6:]), (sb, pb)])  # a's second chunk (offset causal) beside b's whole prompt
        torch.testing.assert_close(both[0], alone[0], rtol=0, atol=1e-5)
        torch.testing.assert_close(both[1], alone[1], rtol=0, atol=1e-5)
        tok = both[0].argmax().view(1)
        c = m.new_cache()
        m(pa_.view(1, -1), c)
        dec = packed_step(m, [(sa, tok), (sb, both[1].argmax().view(1))])[0]
        torch.testing.assert_close(dec, m(tok.view(1, 1), c)[0, -1], rtol=0, atol=1e-5)


def test_capture_writes_steps_and_requests(tmp_path: Path) -> None:
    out = capture_serving(tmp_path / "s.json.gz", n_requests=5, prompt_len_range=(3, 20), output_len_range=(2, 5),
                          max_batch_requests=3, max_batch_tokens=16, device="cpu", seed=1,
                          model_config={"n_layers": 1})
    meta = read_sidecar(sidecar_path(out))
    steps = meta["steps"]
    assert steps and all(s["requests"] for s in steps)
    emitted: dict[str, int] = {}
    for s in steps:
        assert sum(r["tokens"] for r in s["requests"]) <= 16 and len(s["requests"]) <= 3
        for r in s["requests"]:
            emitted[r["request_id"]] = emitted.get(r["request_id"], 0) + r["output_tokens"]
    assert len(emitted) == 5 and meta["output_tokens"] == sum(emitted.values())
    with gzip.open(out, "rt") as fh:
        names = [e["name"] for e in json.load(fh)["traceEvents"] if e.get("cat") == "user_annotation"]
    assert sorted(n for n in names if n.startswith("serve_step#")) == sorted(s["name"] for s in steps)
    with pytest.raises(CaptureError, match="built-in models only"):
        capture_serving(tmp_path / "x.json", model="/nowhere")
