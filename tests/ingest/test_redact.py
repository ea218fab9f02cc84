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


@pytest.mark.parametrize(("text", "clean"), [
    ("aws s3 cp x --aws-secret-access-key wJalrXUtnFEMIK7MDENG --region us-east-1",
     "aws s3 cp x --aws-secret-access-key <redacted> --region us-east-1"),
    ("run.py --password=hunter2 --max-tokens 100", "run.py --password=<redacted> --max-tokens 100"),
    ("run.py --api-key 'a b c' --author me", "run.py --api-key <redacted> --author me"),
    ("HF_TOKEN=abc123 TOKENIZERS_PARALLELISM=false python x.py",
     "HF_TOKEN=<redacted> TOKENIZERS_PARALLELISM=false python x.py"),
    ("postgres://admin:s3cr3t@db:5432/x and https://user@host/p", "postgres://admin:<redacted>@db:5432/x and "
     "https://user@host/p"),
    ("curl -H 'Authorization: Bearer abcdefghijklmnopqrstuvwx'", "curl -H 'Authorization: <redacted>'"),
    ("--bs 4 --steps 10", "--bs 4 --steps 10"),
])
def test_redact_text_options_assignments_and_url_passwords(text: str, clean: str) -> None:
    from taxbreak.ingest.redact import redact_text

    assert redact_text(text) == clean


def test_redact_args_touches_only_rows_with_something_secret_looking() -> None:
    import pyarrow as pa

    from taxbreak.ingest.redact import redact_args

    plain = pa.array(['{"grid":[1,1,1]}', None, '{"name":"x"}'])
    assert redact_args(plain) is plain  # nothing to do: the same array, no copy
    mixed = pa.array(['{"grid": [1, 1, 1]}', '{"api_token":"t0k","n":1}', "not json --password pw"])
    assert redact_args(mixed).to_pylist() == ['{"grid": [1, 1, 1]}', '{"api_token":"<redacted>","n":1}',
                                              "not json --password <redacted>"]


# -- the pre-filter reads groups of rows at once (redact.PREFILTER_GROUP_ROWS) ------------------------------------
SECRET_ROWS = {  # row -> (args text, the text stored): one of each rule, at group edges and inside groups
    0: ('{"HF_TOKEN":"abc"}', '{"HF_TOKEN":"<redacted>"}'),
    255: ("run --password pw", "run --password <redacted>"),
    256: ('{"url":"postgres://admin:pw@db/x"}', '{"url":"postgres://admin:<redacted>@db/x"}'),
    300: ('{"t":"hf_' + "a" * 34 + '"}', '{"t":"<redacted>"}'),
    511: ("ghp_" + "b" * 36, "<redacted>"),
    512: ("AKIAABCDEFGHIJKLMNOP", "<redacted>"),
    700: ("x sk-" + "c" * 24, "x <redacted>"),
    998: ("xoxb-1234567890-abc", "<redacted>"),
    999: ('{"db":{"passwd":"p","n":1}}', '{"db":{"passwd":"<redacted>","n":1}}'),
}
FILLER = '{"grid":[1,1,1],"Input Dims":[[8,16],[16,4]]}'


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("offset", [0, 1, 255])
def test_redact_args_each_rule_in_a_long_batch(large: bool, offset: int) -> None:
    """Every rule's row of a 1,000-row batch (NULLs between) is redacted and no other row changes, whatever the
    array's offset (a slice) and offset width; the rows are those the per-row pre-filter found before."""
    import pyarrow as pa

    from taxbreak.ingest.redact import redact_args

    n = 1000
    text = [None if i % 97 == 5 else FILLER for i in range(n + offset)]
    want = list(text)
    for row, (raw, clean) in SECRET_ROWS.items():
        text[row + offset], want[row + offset] = raw, clean
    args = pa.array(text, pa.large_string() if large else pa.string()).slice(offset)
    assert redact_args(args).to_pylist() == want[offset:]


def test_redact_args_a_match_across_two_rows_redacts_neither() -> None:
    """'tok' ending one row and 'en' starting the next make 'token' only in the group's bytes: both rows are
    checked one by one, neither matches, and the batch is returned as it was (the same array)."""
    import pyarrow as pa

    from taxbreak.ingest.redact import redact_args

    text = [FILLER] * 600
    text[255], text[256] = '{"a":"tok', 'en":1}'
    args = pa.array(text)
    assert redact_args(args) is args
    text[256] = '{"token":1}'  # a row of its own that matches: redacted (a secret key with a value)
    assert redact_args(pa.array(text)).to_pylist()[255:257] == ['{"a":"tok', '{"token":"<redacted>"}']


@pytest.mark.parametrize(("raw", "clean"), [
    ('{"accessKey":"abc"}', '{"accessKey":"<redacted>"}'),
    ('{"awsAccessKey":"abc","n":1}', '{"awsAccessKey":"<redacted>","n":1}'),
    ('{"privateKey":"k"}', '{"privateKey":"<redacted>"}'),
    ("x --accessKey v", "x --accessKey <redacted>"),
    ('{"h":"Bearer abcdefghijklmnopqrstuvwx"}', '{"h":"<redacted>"}'),
])
def test_redact_args_camel_case_keys_and_bearer_values(raw: str, clean: str) -> None:
    """What ``redact`` does to these in the catalogue's metadata reaches args_json too: the pre-filter let camelCase
    secret keys (``is_secret_key`` splits them: access_Key) and bare Bearer values through."""
    import pyarrow as pa

    from taxbreak.ingest.redact import redact_args

    assert redact_args(pa.array([FILLER, raw, None])).to_pylist() == [FILLER, clean, None]
