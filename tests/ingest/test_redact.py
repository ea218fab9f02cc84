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


# -- issue 30: the cases a hostile run found kept, one test each ------------------------------------------------
@pytest.mark.parametrize(("text", "clean"), [
    # an option whose value is the next argument, and the same option with '='
    ("python run.py --password s3cretA1 --bs 4", "python run.py --password <redacted> --bs 4"),
    ("python run.py --password=s3cretA1 --bs 4", "python run.py --password=<redacted> --bs 4"),
    # short and bare option names: -p (mysql, psql), --pass, --key, and an option with no value after it
    ("mysql -u root -p s3cretA2 shop", "mysql -u root -p <redacted> shop"),
    ("mysql -u root -p --host db", "mysql -u root -p --host db"),
    ("run --pass s3cretA3 --bs 4", "run --pass <redacted> --bs 4"),
    ("run --key s3cretA4 --keyword x", "run --key <redacted> --keyword x"),
    ("run --apitoken s3cretA5", "run --apitoken <redacted>"),
    # environment assignments in a command line
    ("PGPASSWORD=s3cretA6 psql -h db", "PGPASSWORD=<redacted> psql -h db"),
    ("MYSQL_PWD=s3cretA7 mysql", "MYSQL_PWD=<redacted> mysql"),
    ("GITLAB_TOKEN=s3cretA8 APP_SECRET=s3cretA9 PWD=/home/me make", "GITLAB_TOKEN=<redacted> APP_SECRET=<redacted> "
     "PWD=/home/me make"),
    ("apitoken=s3cretB1&n=2", "apitoken=<redacted>&n=2"),
    # URL userinfo, a password holding '/'
    ("fetch https://user:pa/ss/s3cretB2@host/x", "fetch https://user:<redacted>@host/x"),
    # an argv list as text (a JSON array printed into a string)
    ('["run.py", "--token", "s3cretB3", "--bs", "4"]', '["run.py", "--token", "<redacted>", "--bs", "4"]'),
])
def test_redact_text_issue_30_cases(text: str, clean: str) -> None:
    from taxbreak.ingest.redact import redact_text

    assert redact_text(text) == clean


@pytest.mark.parametrize(("key", "secret"), [
    ("PGPASSWORD", True), ("MYSQL_PWD", True), ("apitoken", True), ("authToken", True), ("client_secret", True),
    ("PWD", False), ("OLDPWD", False), ("max_tokens", False), ("monkey", False), ("bypass", False),
])
def test_secret_key_suffixes(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_argv_list_value_is_the_next_element() -> None:
    argv = ["run.py", "--password", "s3cretC1", "-p", "s3cretC2", "--bs", "4", "--key=s3cretC3", "--pass", ""]
    assert redact({"argv": argv}) == {"argv": ["run.py", "--password", REDACTED, "-p", REDACTED, "--bs", "4",
                                               "--key=<redacted>", "--pass", ""]}


def test_redact_names_once_per_distinct_name() -> None:
    import pyarrow as pa

    from taxbreak.ingest.redact import redact_names

    plain = pa.array(["aten::mm", "gemm_kernel", None, "cudaLaunchKernel"])
    assert redact_names(plain) is plain
    url = "GET https://admin:s3cretC4@db.internal/q"
    names = pa.array(["aten::mm", url, "key_value_kernel", None, url, "nvtx --token s3cretC5"])
    assert redact_names(names).to_pylist() == [
        "aten::mm", "GET https://admin:<redacted>@db.internal/q", "key_value_kernel", None,
        "GET https://admin:<redacted>@db.internal/q", "nvtx --token <redacted>"]


def test_redact_location_keeps_the_path() -> None:
    from taxbreak.ingest.redact import redact_location

    assert redact_location("s3://ak:s3cretC6@bucket/x.json") == "s3://ak:<redacted>@bucket/x.json"
    assert redact_location("/data/max_token=5/run.json") == "/data/max_token=5/run.json"
    assert redact_location(None) is None


# every planted secret: metadata (command line, argv list, env), event names, event args, the source URL
PLANTED = {
    "s3cretP01": "--password s3cretP01", "s3cretP02": "--password=s3cretP02", "s3cretP03": "-p s3cretP03",
    "s3cretP04": "--pass s3cretP04", "s3cretP05": "--key s3cretP05", "s3cretP06": "PGPASSWORD=s3cretP06",
    "s3cretP07": "MYSQL_PWD=s3cretP07", "s3cretP08": "apitoken=s3cretP08",
    "s3cretP09": "postgres://u:pa/s3cretP09@db/x", "s3cretP10": "HF_TOKEN=s3cretP10",
}


def _planted_trace() -> bytes:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "load https://admin:s3cretN1@db.internal/q", "pid": 1,
         "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"External id": 1, "cmd": " ".join(PLANTED.values()), "argv": ["x", "--token", "s3cretN2"]}},
        {"ph": "X", "cat": "user_annotation", "name": "step --api-key s3cretN3", "pid": 1, "tid": 1, "ts": 30,
         "dur": 5},
    ]
    meta = {"cmdline": "python bench.py " + " ".join(PLANTED.values()),
            "argv": ["bench.py", "--password", "s3cretM1", "-p", "s3cretM2", "--key", "s3cretM3"],
            "env": {"PGPASSWORD": "s3cretM4", "MYSQL_PWD": "s3cretM5", "apitoken": "s3cretM6"}}
    return json.dumps({"schemaVersion": 1, "traceEvents": events, **meta}).encode()


def test_no_planted_secret_reaches_the_lake_traces_or_sql(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """End to end: ingest, `traces --json`, `sql` over the events and the catalogue; every byte they show."""
    import pyarrow.parquet as pq

    from taxbreak.cli import main

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "planted.json").write_bytes(_planted_trace())
    paths = ["--lake", str(tmp_path / "lake"), "--warehouse", str(tmp_path / "taxbreak.duckdb")]
    assert main(["ingest", "-q", str(inbox), *paths]) == 0
    assert main(["analyze", "-q", *paths]) == 0
    capsys.readouterr()
    assert main(["traces", "--json", *paths]) == 0
    shown = capsys.readouterr().out
    (row,) = json.loads(shown)
    assert row["metadata"]["env"] == {"PGPASSWORD": REDACTED, "MYSQL_PWD": REDACTED, "apitoken": REDACTED}
    assert row["metadata"]["argv"] == ["bench.py", "--password", REDACTED, "-p", REDACTED, "--key", REDACTED]
    assert main(["sql", "--format", "json", "SELECT name, args_json FROM events ORDER BY ts_ns", *paths]) == 0
    events = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in events] == ["load https://admin:<redacted>@db.internal/q", "aten::mm",
                                           "step --api-key <redacted>"]
    assert json.loads(events[1]["args_json"])["argv"] == ["x", "--token", REDACTED]
    stored = shown + json.dumps(events)
    for part in (tmp_path / "lake").rglob("*.parquet"):
        stored += json.dumps(pq.read_table(part).to_pylist(), default=str)
    kept = sorted(s for s in re.findall(r"s3cret[A-Z]\d+", _planted_trace().decode()) if s in stored)
    assert kept == []
    assert stored.count(REDACTED) >= 3 * len(PLANTED)
