"""The deployment examples in deploy/ load: instance files against Dagster's instance schema, run configs
against the real jobs' resource schema, executor sections against the executors' documented keys.

dagster-k8s and dagster-celery are not installed here (they are only needed on the cluster), so their
executor blocks are checked against the keys those executors accept (dagster_k8s/executor.py
``_K8S_EXECUTOR_CONFIG_SCHEMA`` with ``DagsterK8sJobConfig.config_type_job()``; dagster_celery
``celery_executor`` config) rather than by importing them.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.instance.config import dagster_instance_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

K8S_EXECUTOR_KEYS = {
    "job_namespace", "retries", "max_concurrent", "tag_concurrency_limits", "job_image", "image_pull_policy",
    "image_pull_secrets", "service_account_name", "env_config_maps", "env_secrets", "env_vars", "volume_mounts",
    "volumes", "labels", "resources", "scheduler_name", "security_context", "step_k8s_config",
    "per_step_k8s_config", "load_incluster_config", "kubeconfig_file",
}
CELERY_EXECUTOR_KEYS = {"broker", "backend", "include", "config_source", "retries"}


@pytest.mark.parametrize("path", ["dagster.yaml", "k8s/dagster.yaml", "celery/dagster.yaml"])
def test_instance_files_validate(path: str, tmp_path: Path) -> None:
    (tmp_path / "dagster.yaml").write_text((DEPLOY / path).read_text())
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["telemetry"] == {"enabled": False}
    assert config["concurrency"]["pools"]["default_limit"] == 1  # the single DuckDB writer


def test_k8s_instance_uses_the_k8s_launcher_and_s3_logs() -> None:
    data = yaml.safe_load((DEPLOY / "k8s" / "dagster.yaml").read_text())
    assert (data["run_launcher"]["module"], data["run_launcher"]["class"]) == ("dagster_k8s", "K8sRunLauncher")
    assert data["compute_logs"]["class"] == "S3ComputeLogManager"


@pytest.mark.parametrize(("path", "keys"), [("k8s/run_config.yaml", K8S_EXECUTOR_KEYS),
                                            ("celery/run_config.yaml", CELERY_EXECUTOR_KEYS)])
def test_run_configs_validate(path: str, keys: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from taxbreak.pipeline.local import load_defs

    monkeypatch.setenv("TAXBREAK_S3_ENDPOINT_URL", "http://minio.internal:9000")
    run_config = yaml.safe_load((DEPLOY / path).read_text())
    execution = run_config.pop("execution")["config"]
    assert set(execution) <= keys, set(execution) - keys
    defs = load_defs()
    for job_name in ("refresh_job", "ingest_batch_job"):
        dg.validate_run_config(defs.resolve_job_def(job_name), run_config)
    validated = dg.validate_run_config(defs.resolve_job_def("trace_job"), run_config)["resources"]
    assert validated["bucket"]["config"]["url"] == "s3://taxbreak-reports/inbox"
    assert validated["bucket"]["config"]["endpoint_url"] == "http://minio.internal:9000"
    assert validated["lake"]["config"]["root"] == "s3://taxbreak-lake/lake"  # the lake in S3 as well
    assert validated["lake"]["config"]["endpoint_url"] == "http://minio.internal:9000"
    assert validated["warehouse"]["config"]["path"] == "/data/taxbreak/taxbreak.duckdb"  # DuckDB: a POSIX file
    # the resources these configs make: the lake on the store, on the bucket's endpoint
    from taxbreak.pipeline.defs.resources import LakeResource

    lake = LakeResource(**validated["lake"]["config"]).get()
    assert (lake.is_object_store, lake.url) == (True, "s3://taxbreak-lake/lake")
    assert lake.s3 is not None and lake.s3.endpoint_url == "http://minio.internal:9000"
    bad = {"resources": {"bucket": {"config": {"url": "s3://x", "no_such_field": 1}}}}
    with pytest.raises(dg.DagsterInvalidConfigError):
        dg.validate_run_config(defs.resolve_job_def("trace_job"), bad)


def test_executor_choice_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from taxbreak.pipeline.defs.executor import executor_from_env

    monkeypatch.delenv("TAXBREAK_EXECUTOR", raising=False)
    assert executor_from_env() is dg.multiprocess_executor
    monkeypatch.setenv("TAXBREAK_EXECUTOR", "k8s")
    with pytest.raises(ImportError, match="dagster_k8s"):
        executor_from_env()
    monkeypatch.setenv("TAXBREAK_EXECUTOR", "spark")
    with pytest.raises(ValueError, match="expected multiprocess"):
        executor_from_env()


def test_celery_worker_config_matches_the_run_config() -> None:
    """The workers' config (``dagster-celery worker start -y``) repeats the run config's broker, backend and
    Celery settings: they must agree, or workers listen on another queue than the one runs submit to."""
    worker = yaml.safe_load((DEPLOY / "celery" / "celery_config.yaml").read_text())["execution"]["config"]
    run = yaml.safe_load((DEPLOY / "celery" / "run_config.yaml").read_text())["execution"]["config"]
    assert set(worker) == {"broker", "backend", "config_source"} and set(worker) <= CELERY_EXECUTOR_KEYS
    assert worker == {k: run[k] for k in worker}
