"""Secrets in trace metadata never reach the catalogue."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest.redact import REDACTED, is_secret_key, redact

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.mark.parametrize(("key", "secret"), [
    ("HF_TOKEN", True), ("AWS_SECRET_ACCESS_KEY", True), ("db.password", True), ("apiKey", True),
    ("GITHUB_TOKEN", True), ("credentials", True),
    ("TOKENIZERS_PARALLELISM", False), ("author", False), ("max_tokens", False), ("keyword", False),
    ("CUDA_VISIBLE_DEVICES", False),
])
def test_secret_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_redact_keys_and_token_shaped_values() -> None:
    hf = "hf_" + "a1B2" * 9
    meta = {"env": {"HF_TOKEN": hf, "TOKENIZERS_PARALLELISM": "false", "EMPTY_TOKEN": ""},
            "cmd": f"python run.py --token-value {hf} --bs 4", "list": [{"apiKey": 42}], "n": 3}
    assert redact(meta) == {
        "env": {"HF_TOKEN": REDACTED, "TOKENIZERS_PARALLELISM": "false", "EMPTY_TOKEN": ""},
        "cmd": f"python run.py --token-value {REDACTED} --bs 4", "list": [{"apiKey": REDACTED}], "n": 3,
    }


def test_public_trace_token_stays_out_of_the_catalogue(tmp_path: Path, public_trace: Callable[[str], Path]) -> None:
    qwen = public_trace(QWEN)
    with gzip.open(qwen) as fh:
        raw = json.load(fh)
    env_tokens = re.findall(r'"HF_TOKEN": "([^"]+)"', json.dumps(raw.get("metadata")))
    assert env_tokens and all(t for t in env_tokens)  # the public file does embed one
    res = ingest_file(qwen, Lake(tmp_path / "lake"))
    assert res.status == "ingested"
    stored = res.row["metadata_json"]
    assert all(t not in stored for t in env_tokens)
    assert '"HF_TOKEN": "<redacted>"' in stored and '"TOKENIZERS_PARALLELISM"' in stored
