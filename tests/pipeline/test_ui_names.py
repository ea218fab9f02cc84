"""What a person sees in the Dagster UI: partition keys that name the file, run tags beside them, resources that show
the environment variable they read (never a credential's value); keys registered before (64 hex) keep working."""

from __future__ import annotations

import hashlib
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from taxbreak.pipeline.defs.ingest_assets import (
    PartitionIndex,
    key_matches,
    partition_key_for,
    run_trace_id,
    trace_id_of_key,
)
from taxbreak.pipeline.local import execute_request, load_defs, tick

from .conftest import write_kineto

H = "0123456789abcdef" * 4  # a 64-hex trace id
H2 = "0123456789abffff" + "0" * 48  # same first 12 hex as H, another trace


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_partition_key_for() -> None:
    assert partition_key_for("run1/good.pt.trace.json", H) == "good.pt.trace-0123456789ab"
    assert partition_key_for("gpu-01/report1.nsys-rep", H) == "report1-0123456789ab"
    assert partition_key_for("x/step 7 (bs=4).json.gz", H) == "step_7_bs_4-0123456789ab"  # spaces, brackets, '='
    assert partition_key_for("a...b.SQLITE", H) == "a.b-0123456789ab"  # Dagster refuses '...' in a key
    assert partition_key_for("!!!.json", H) == "trace-0123456789ab"  # nothing readable left
    assert partition_key_for("k" * 100 + ".db", H) == "k" * 48 + "-0123456789ab"


def test_keys_map_to_trace_ids(tmp_path: Path) -> None:
    from taxbreak.ingest import Lake

    assert key_matches(H, H) and not key_matches(H, H2)  # a 64-hex key: exactly its trace
    assert key_matches("good-0123456789ab", H) and key_matches("good-0123456789ab", H2)
    assert not key_matches("good-0123456789ac", H) and not key_matches("good", H)
    index = PartitionIndex([H2, "good-0123456789ab", "other-fedcba987654"])
    assert index.key_of(H2) == H2  # registered before readable keys: its old key is kept
    assert index.key_of(H) == "good-0123456789ab"
    assert index.key_of("fedcba987654" + "1" * 52) == "other-fedcba987654" and "f" * 64 not in index
    # through the catalogue (file names = trace ids): one match, none, or several (refused, naming them)
    lake = Lake(tmp_path / "lake")
    (tmp_path / "lake" / "catalogue").mkdir(parents=True)
    (tmp_path / "lake" / "catalogue" / f"{H}.parquet").write_bytes(b"")
    assert trace_id_of_key("good-0123456789ab", lake) == H and trace_id_of_key(H2, lake) == H2
    assert trace_id_of_key("good-aaaaaaaaaaaa", lake) is None and trace_id_of_key("no-hex-here", lake) is None
    (tmp_path / "lake" / "catalogue" / f"{H[:12]}{'0' * 52}.parquet").write_bytes(b"")
    with pytest.raises(dg.Failure, match="2 traces in the catalogue start with 0123456789ab"):
        trace_id_of_key("good-0123456789ab", lake)
    # a run's trace id: its tag first (the catalogue is not read), else its partition key
    assert run_trace_id({"taxbreak/trace_id": H2, "dagster/partition": "x-0123456789ab"}, lambda: 1 / 0) == H2
    assert run_trace_id({"dagster/partition": H}, lambda: 1 / 0) == H and run_trace_id({}, lambda: 1 / 0) is None
    with pytest.raises(dg.Failure, match="no trace in the catalogue starts with aaaaaaaaaaaa"):
        run_trace_id({"dagster/partition": "good-aaaaaaaaaaaa"}, lambda: lake)


def test_resources_bind_the_variables_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from taxbreak.pipeline.defs.resources import BucketResource, env_bindings

    environ = {"TAXBREAK_LAKE": "/data/lake", "AWS_ENDPOINT_URL": "http://s3:9000", "AWS_SECRET_ACCESS_KEY": "x",
               "TAXBREAK_CACHE": "  "}  # blank = unset
    assert {f: v.env_var_name for f, v in env_bindings("lake", environ).items()} == {
        "root": "TAXBREAK_LAKE", "endpoint_url": "AWS_ENDPOINT_URL", "secret_access_key": "AWS_SECRET_ACCESS_KEY"}
    environ["TAXBREAK_S3_ENDPOINT_URL"] = "http://minio:9000"  # the project's own variable wins
    assert env_bindings("lake", environ)["endpoint_url"].env_var_name == "TAXBREAK_S3_ENDPOINT_URL"
    assert env_bindings("warehouse", {}) == {}
    # unbound fields take the registry's defaults (taxbreak.config) when used
    for name in ("TAXBREAK_SETTLE_S", "TAXBREAK_BUCKET", "TAXBREAK_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TAXBREAK_INBOX", "/drop/here")
    monkeypatch.chdir(Path("/"))  # no taxbreak.toml above
    assert BucketResource().resolved_settle_s() == 10.0 and BucketResource().resolved_url() == "/drop/here"
    assert BucketResource(settle_s="2.5").resolved_settle_s() == 2.5
    from taxbreak.config import ConfigError

    with pytest.raises(ConfigError, match="pipeline.settle_s must be float"):
        BucketResource(settle_s="soon").resolved_settle_s()


def test_ui_shows_variables_not_secrets(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's resource config (what the launchpad and the run's config show) names the variables; the secret's
    value appears nowhere in it; a run launched now reads the values."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    defs = load_defs()
    schema = defs.resolve_job_def("trace_job").run_config_schema.config_type.fields["resources"].config_type.fields
    shown = {r: schema[r].config_type.fields["config"].default_value for r in ("bucket", "lake", "warehouse")}
    assert shown["lake"]["root"] == {"env": "TAXBREAK_LAKE"} and shown["lake"]["cache"] == {"env": "TAXBREAK_CACHE"}
    assert shown["bucket"]["secret_access_key"] == {"env": "AWS_SECRET_ACCESS_KEY"}
    assert shown["bucket"]["settle_s"] == {"env": "TAXBREAK_SETTLE_S"} and shown["bucket"]["url"] is None  # unset
    assert shown["warehouse"] == {"path": {"env": "TAXBREAK_WAREHOUSE"}}
    assert "s3cr3t-value" not in repr(shown)


def test_sensor_runs_under_readable_keys_and_old_hex_keys(env: dict[str, Path], instance: dg.DagsterInstance) -> None:
    inbox = env["inbox"]
    new = write_kineto(inbox / "gpu-01" / "llama step.pt.trace.json", 2)
    old = write_kineto(inbox / "older.json", 3, base_us=50.0)
    bad = inbox / "broken.json"
    bad.write_bytes(b'{"traceEvents": [{"ph": "X", "name": ')
    instance.add_dynamic_partitions("traces", [_sha(old)])  # registered by an earlier version: the 64-hex id
    defs = load_defs()
    t1 = tick(defs, instance)
    readable, broken = f"llama_step.pt.trace-{_sha(new)[:12]}", f"broken-{_sha(bad)[:12]}"
    assert sorted(t1.partition_keys) == sorted([readable, _sha(old), broken]) and all(r.success for r in t1.runs)
    assert set(instance.get_dynamic_partitions("traces")) == {readable, _sha(old), broken}  # none again for `older`
    # per-trace status: the analysed traces have a trace_analysis partition, the file that failed has none
    assert instance.get_materialized_partitions(dg.AssetKey("trace_analysis")) == {readable, _sha(old)}
    analysis = {e.partition: e.materialization.metadata for r in t1.runs for e in r.get_asset_materialization_events()
                if e.asset_key == dg.AssetKey("trace_analysis")}
    assert analysis[readable]["file_name"].value == "llama step.pt.trace.json"
    assert (analysis[readable]["kernels"].value, analysis[_sha(old)]["kernels"].value) == (2, 3)
    assert analysis[readable]["trace_id"].value == _sha(new)
    # the verdict leads the metadata: two kernels are too few to call a bound (RunConfig.verdict_min_kernels)
    assert list(analysis[readable])[:3] == ["verdict", "top_lever", "verdict_block"]
    assert analysis[readable]["verdict"].value == "not enough evidence (low)"
    block = analysis[readable]["verdict_block"].value.lstrip()
    assert block.startswith("VERDICT  NOT ENOUGH EVIDENCE (confidence low)")
    figures = {k: analysis[readable][k].value
               for k in ("t_orchestrate_ns", "delta_ft_ns", "delta_ct_ns", "delta_kt_ns")}
    assert figures["t_orchestrate_ns"] == figures["delta_ft_ns"] + figures["delta_ct_ns"] + figures["delta_kt_ns"] > 0
    # what the runs list shows beside the partition: the file and the full trace id
    (rec,) = instance.get_run_records(dg.RunsFilter(tags={"dagster/partition": readable}))
    assert rec.dagster_run.tags["taxbreak/source"] == "gpu-01/llama step.pt.trace.json"
    assert rec.dagster_run.tags["taxbreak/trace_id"] == _sha(new)
    # the partition's materialisation (the asset's partition page): file name and trace id
    by_partition = {}
    for key in (readable, _sha(old)):
        (ev,) = [e for r in t1.runs for e in r.get_asset_materialization_events()
                 if e.asset_key == dg.AssetKey("trace_ingest") and e.partition == key]
        by_partition[key] = ev.materialization.metadata
    assert by_partition[readable]["file_name"].value == "llama step.pt.trace.json"
    assert by_partition[readable]["trace_id"].value == _sha(new)
    assert by_partition[_sha(old)]["file_name"].value == "older.json"
    with duckdb.connect(str(env["warehouse"]), read_only=True) as con:
        kernels = dict(con.execute("SELECT trace_id, count(*) FROM kernel_taxbreak GROUP BY ALL").fetchall())
    assert kernels == {_sha(new): 2, _sha(old): 3}

    # a materialisation of the readable partition from the UI: no trace id tag, no source; the key is mapped to
    # the trace through the catalogue, the file is read again from its recorded source, the tables follow
    ui = execute_request(defs, instance, dg.RunRequest(partition_key=readable, run_config={
        "ops": {"trace_ingest": {"config": {"force": True}}}}))
    assert ui.success
    (ktx,) = [e for e in ui.get_asset_materialization_events() if e.asset_key == dg.AssetKey("kernel_taxbreak")]
    assert ktx.materialization.metadata["scope"].value == f"trace {_sha(new)[:16]}"
    assert ktx.materialization.metadata["rows_computed"].value == 2
    (ing,) = [e for e in ui.get_asset_materialization_events() if e.asset_key == dg.AssetKey("trace_ingest")]
    assert ing.partition == readable and ing.materialization.metadata["status"].value == "ingested"
    (ana,) = [e for e in ui.get_asset_materialization_events() if e.asset_key == dg.AssetKey("trace_analysis")]
    assert ana.partition == readable and ana.materialization.metadata["kernels"].value == 2
