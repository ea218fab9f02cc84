"""Where things live and the settings a user may change: each defined once here (``SETTINGS``).

Every setting is looked up in this order: the command's option (``--lake``, ``--t-sys-ns`` ...), its environment
variable, the ``taxbreak.toml`` found from the working directory upward (or named by ``$TAXBREAK_CONFIG``), then
the embedded default.  Relative paths in ``taxbreak.toml`` are relative to the folder holding it.  A path not set
anywhere is ``<home>/<leaf>``, home being ``$TAXBREAK_HOME``, the file's ``[paths] home`` or ``warehouse``::

    # taxbreak.toml
    [paths]
    home = "warehouse"            # lake/, taxbreak.duckdb, inbox/, cache/ under it unless set one by one
    lake = "/data/lake"           # or s3://bucket/prefix
    [analysis]
    t_sys_ns = 4400               # your own launch floor T_sys for every trace (provenance user_setting)
    duckdb_memory = "4GB"

The lake may be an ``s3://bucket/prefix`` URL (``TAXBREAK_LAKE``); ``Paths.lake`` then holds it as a ``Path``
(``s3:/bucket/prefix``, one slash), which ``taxbreak.ingest.Lake`` accepts and turns back into the URL.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

# the object store's settings belong to the lake (taxbreak.ingest.objects, imported by nothing above schemas/);
# found here too, where every caller reads its settings
from taxbreak.ingest.base import IngestLimits
from taxbreak.ingest.objects import is_s3_url

CONFIG_FILE_NAME = "taxbreak.toml"
CONFIG_ENV = "TAXBREAK_CONFIG"


class ConfigError(ValueError):
    """A taxbreak.toml or a setting's value that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Setting:
    key: str  # "<table>.<name>" in taxbreak.toml
    env: str  # the environment variable
    kind: type  # str, int, float or bool
    default: Any  # None: unset (the code that reads it has its own documented default)
    help: str


# Every user setting, once.  Paths default to <home>/<leaf> (see the module doc).
SETTINGS: dict[str, Setting] = {s.key: s for s in (
    Setting("paths.home", "TAXBREAK_HOME", str, "warehouse", "folder holding every path not set one by one"),
    Setting("paths.lake", "TAXBREAK_LAKE", str, None, "the Parquet lake (a folder or s3://bucket/prefix)"),
    Setting("paths.warehouse", "TAXBREAK_WAREHOUSE", str, None, "the DuckDB warehouse file"),
    Setting("paths.inbox", "TAXBREAK_INBOX", str, None, "the local bucket the pipeline watches"),
    Setting("paths.cache", "TAXBREAK_CACHE", str, None, "exports of .nsys-rep reports"),
    Setting("paths.marts", "TAXBREAK_MARTS", str, None,
            "the per-trace Parquet marts: a folder or s3://bucket/prefix (unset: marts/ beside the DuckDB file)"),
    Setting("paths.bucket", "TAXBREAK_BUCKET", str, None,
            "where the pipeline takes reports from: a folder or s3://bucket/prefix (unset: the inbox)"),
    Setting("pipeline.settle_s", "TAXBREAK_SETTLE_S", float, 10.0,
            "seconds a bucket file must stay unchanged before the pipeline's sensor takes it"),
    Setting("analysis.t_sys_ns", "TAXBREAK_T_SYS_NS", int, None,
            "launch floor T_sys (ns) for every trace, instead of the measured or default one"),
    # 512MB keeps the analysis's peak RSS under 1 GB (DuckDB's own allocations, Python and Arrow come on top; the
    # rest spills): measured by bench/run_all.py
    Setting("analysis.duckdb_memory", "TAXBREAK_DUCKDB_MEMORY", str, "512MB", "DuckDB memory_limit of the analyses"),
    Setting("analysis.writer_wait_s", "TAXBREAK_WRITER_WAIT_S", float, 600.0,
            "how long a writer waits for the warehouse (another writer, or a reader holding the file)"),
    # a reader pays about 1 ms per Parquet file per table it scans: 4 loose traces and tiers of 4 keep the docs/queries
    # over 1,000 traces within 1.4x one DuckDB table (bench/bench_marts.py)
    Setting("marts.compact_loose", "TAXBREAK_MARTS_COMPACT_LOOSE", int, 4,
            "loose per-trace partitions of the Parquet marts that trigger their compaction into one segment"),
    Setting("marts.compact_fanout", "TAXBREAK_MARTS_COMPACT_FANOUT", int, 4,
            "segments of one tier of the Parquet marts merged into one of the next tier"),
    Setting("marts.keep_replaced_s", "TAXBREAK_MARTS_KEEP_REPLACED_S", float, 600.0,
            "seconds a marts file the layout no longer uses stays for readers of the previous snapshot"),
    Setting("sql.unrestricted", "TAXBREAK_SQL_UNRESTRICTED", bool, False,
            "let `taxbreak sql` read and write files outside the warehouse, lake and exports"),
    Setting("ingest.max_gzip_ratio", "TAXBREAK_MAX_GZIP_RATIO", float, IngestLimits.max_gzip_ratio,
            "a gzip trace may expand to at most this many times its size (beyond 64 MiB); more fails it"),
    Setting("ingest.max_temp_bytes", "TAXBREAK_MAX_TEMP_BYTES", int, IngestLimits.max_temp_bytes,
            "bytes of JSON one ingest may write to its temporary folder (it needs about twice that at peak)"),
    Setting("ingest.max_json_depth", "TAXBREAK_MAX_JSON_DEPTH", int, IngestLimits.max_json_depth,
            "deepest nesting of arrays and objects accepted in a Kineto trace"),
    # Comparable runs and their trends (issue 28; docs/method.md section "Trends and regressions", ours).  The
    # workload key: the run-spec fields (sql/run_spec.sql, RUN_SPEC_FIELDS) two runs must share to be compared.
    # Versions and T_sys provenance are left out on purpose: an upgrade is what a regression is looked for across.
    Setting("trends.workload_key", "TAXBREAK_WORKLOAD_KEY", str,
            "program,gpu_name,gpu_count,host_cpu,dtype,batch_size,seq_len,output_tokens,phase_mix,trace_kind,"
            "capture_tool",
            "comma-separated run-spec fields that form the workload key (runs compared with each other share them)"),
    Setting("trends.window_runs", "TAXBREAK_TRENDS_WINDOW_RUNS", int, 20,
            "previous runs of a workload whose median and MAD are a run's baseline"),
    Setting("trends.min_runs", "TAXBREAK_TRENDS_MIN_RUNS", int, 10,
            "previous runs a workload needs before a run can be flagged"),
    Setting("trends.mad_k", "TAXBREAK_TRENDS_MAD_K", float, 3.0,
            "a figure moved when the median of a run and the next ones (trends.confirm_runs) differs from the "
            "baseline median by more than this many robust sigmas (1.4826 x MAD) of the baseline"),
    Setting("trends.min_rel_change", "TAXBREAK_TRENDS_MIN_REL_CHANGE", float, 0.05,
            "... and at least this share of the baseline median (a change below it is never flagged)"),
    Setting("trends.confirm_runs", "TAXBREAK_TRENDS_CONFIRM_RUNS", int, 5,
            "runs (this one and the next) whose median must have moved: one noisy run is no change point"),
)}
# The run-spec fields a workload key may name (the columns of sql/run_spec.sql that describe the run; tested).
RUN_SPEC_FIELDS = (
    "program", "model", "gpu_name", "gpu_count", "host_cpu", "dtype", "batch_size", "seq_len", "output_tokens",
    "phase_mix", "trace_kind", "torch_version", "cuda_version", "engine", "engine_version", "t_sys_source",
    "capture_tool", "capture_tool_version",
)


def workload_key_fields(option: str | None = None) -> list[str]:
    """The ``trends.workload_key`` setting as a list of run-spec fields; ConfigError names an unknown one."""
    resolved = setting("trends.workload_key", option)
    fields = [f.strip() for f in str(resolved.value).split(",") if f.strip()]
    unknown = [f for f in fields if f not in RUN_SPEC_FIELDS]
    if unknown or not fields:
        raise ConfigError(f"{describe_origin(resolved.origin)}: trends.workload_key names unknown run-spec "
                          f"field(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(RUN_SPEC_FIELDS)}")
    return fields
_PATH_LEAVES = {"lake": "lake", "warehouse": "taxbreak.duckdb", "inbox": "inbox", "cache": "cache"}


def find_config_file(start: Path | None = None) -> Path | None:
    """``$TAXBREAK_CONFIG`` when set, else the first ``taxbreak.toml`` in ``start`` (the working directory) or
    a folder above it."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(f"${CONFIG_ENV} names {path}, which is not a file")
        return path.resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_FILE_NAME
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=16)
def _read_toml(path: Path, mtime_ns: int) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    flat: dict[str, Any] = {}
    for table, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: '{table}' must be a table such as [paths] or [analysis]")
        for name, value in values.items():
            key = f"{table}.{name}"
            if key not in SETTINGS:
                raise ConfigError(f"{path}: unknown setting '{key}'; known: {', '.join(SETTINGS)}")
            flat[key] = value
    return flat


def _convert(setting: Setting, value: Any, where: str) -> Any:
    kind = setting.kind
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(value)
        if kind is int and isinstance(value, float | bool):
            raise ValueError(value)
        out = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {setting.key} must be {kind.__name__}, got {value!r}") from None
    if kind in (int, float) and out < 0:
        raise ConfigError(f"{where}: {setting.key} must not be negative, got {value!r}")
    return out


@dataclass(frozen=True)
class Resolved:
    value: Any
    origin: str  # 'option', '$ENV', the taxbreak.toml path, or 'default'


def setting(key: str, option: Any = None, start: Path | None = None) -> Resolved:
    """The value of setting ``key`` and where it came from (option > environment > taxbreak.toml > default)."""
    s = SETTINGS[key]
    if option is not None:
        return Resolved(_convert(s, option, "option"), "option")
    env = os.environ.get(s.env)
    if env is not None and env.strip() != "":
        return Resolved(_convert(s, env.strip(), f"${s.env}"), f"${s.env}")
    path = find_config_file(start)
    if path is not None:
        values = _read_toml(path, path.stat().st_mtime_ns)
        if key in values:
            value = _convert(s, values[key], str(path))
            if key.startswith("paths.") and isinstance(value, str) and not is_s3_url(value):
                value = str(path.parent / value) if not Path(value).is_absolute() else value
            return Resolved(value, str(path))
    return Resolved(s.default, "default")


@dataclass(frozen=True)
class Paths:
    lake: Path
    warehouse: Path
    inbox: Path
    cache: Path

    @classmethod
    def from_env(cls, base: Path | None = None) -> Paths:
        """Every path: ``base``/<leaf> when given, else each setting's value (environment, taxbreak.toml, home)."""
        if base is not None:
            return cls(**{name: Path(base) / leaf for name, leaf in _PATH_LEAVES.items()})
        home = Path(setting("paths.home").value)
        out = {}
        for name, leaf in _PATH_LEAVES.items():
            value = setting(f"paths.{name}").value
            out[name] = Path(value) if value is not None else home / leaf
        return cls(**out)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Paths:
        """The configured paths, with a command's ``--lake`` / ``--warehouse`` options applied."""
        paths = cls.from_env()
        if getattr(args, "lake", None):
            paths = replace(paths, lake=Path(args.lake))
        if getattr(args, "warehouse", None):
            paths = replace(paths, warehouse=Path(args.warehouse))
        return paths

    def origins(self) -> dict[str, str]:
        """Where each path was configured (for messages that must say which path they read and why)."""
        return {name: setting(f"paths.{name}").origin for name in _PATH_LEAVES}


def describe_origin(origin: str) -> str:
    return {"default": "the default", "option": "the command line"}.get(origin, origin)


def add_path_args(p: argparse.ArgumentParser, *, lake: bool = True, warehouse: bool = True) -> None:
    """The ``--lake`` / ``--warehouse`` options every subcommand that touches them shares."""
    if lake:
        p.add_argument("--lake", help="lake root (default $TAXBREAK_LAKE, taxbreak.toml, or warehouse/lake)")
    if warehouse:
        p.add_argument("--warehouse", help="DuckDB file (default $TAXBREAK_WAREHOUSE, taxbreak.toml, or "
                       "warehouse/taxbreak.duckdb)")


def ingest_limits() -> IngestLimits:
    """The ingest's limits from the settings ``ingest.max_gzip_ratio``, ``ingest.max_temp_bytes`` and
    ``ingest.max_json_depth`` (the ingest receives them from its caller: ``taxbreak.ingest`` reads no setting)."""
    return IngestLimits(max_gzip_ratio=float(setting("ingest.max_gzip_ratio").value),
                        max_temp_bytes=int(setting("ingest.max_temp_bytes").value),
                        max_json_depth=int(setting("ingest.max_json_depth").value))
