"""The trace sidecar: ``<trace>.meta.json`` and the same object under the key ``"taxbreak"`` of a Kineto trace's
top-level metadata (the capture tool writes both).  It carries what a trace cannot say about itself: token
counts, batch size, the phase of each step, and whether the trace is a null-kernel floor measurement.

Schema (version 1; documented in docs/sidecar.md)::

    {"taxbreak_meta_version": 1, "model": str, "model_kind": "dense" | "moe", "dtype": str, "device": str,
     "gpu_name": str, "batch_size": int, "prompt_len": int, "output_tokens": int,
     "steps": [{"name": "prefill", "phase": "prefill", "tokens": 1}, {"name": "decode_step#1", ...}],
               (a serving step may also list its "requests": request_id, tenant, phase, tokens, context_tokens)
     "synthetic": bool, "kind": "generation" | "null_kernel" | "sweep_point", "sweep": {...}}

Every key but ``taxbreak_meta_version`` is optional; unknown keys are kept (forward compatible).

The sidecar enters the lake with its trace: ``sidecar_update`` makes the catalogue keys (``SIDECAR_KEYS``) that
``taxbreak.ingest.ingest_file`` writes into the trace's ``metadata_json`` when it ingests the trace (a local file or
an S3 object) and ``taxbreak.store.bucket.apply_sidecar`` when a sidecar arrives later; ``find_meta`` reads them
back, so the analysis reads the lake alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from taxbreak.ingest.request_lists import REQUESTS_ERROR_KEY

META_VERSION = 1
SIDECAR_SUFFIX = ".meta.json"
SIDECAR_MAX_BYTES = 1 << 20  # a sidecar is a few hundred bytes; larger is refused, not read
# Keys of the catalogue's metadata_json that hold what the ingest found beside the trace:
SIDECAR_KEY = "taxbreak_sidecar"  # the sidecar object, validated
SIDECAR_ERROR_KEY = "taxbreak_sidecar_error"  # why a sidecar found was not used (invalid, unreadable)
SIDECAR_SOURCE_KEY = "taxbreak_sidecar_source"  # the sidecar's path or URL
SIDECAR_CHECKED_KEY = "taxbreak_sidecar_checked"  # true: the ingest looked; the catalogue holds what it found
SIDECAR_KEYS = (SIDECAR_KEY, SIDECAR_ERROR_KEY, SIDECAR_SOURCE_KEY, SIDECAR_CHECKED_KEY)
KINDS = ("generation", "null_kernel", "sweep_point")
PHASES = ("prefill", "decode", "mixed", "other")
MODEL_KINDS = ("dense", "moe")

_INT_KEYS = ("batch_size", "prompt_len", "output_tokens")
_STR_KEYS = ("model", "dtype", "device", "gpu_name")
# the largest count a sidecar may hold: every JSON reader holds it exactly and it fits the warehouse's BIGINT (a
# larger integer passed here and became NULL there, reported as missing)
MAX_COUNT = 2**53 - 1
SWEEP_PHASES = ("prefill", "decode")


class MetaError(ValueError):
    """A sidecar or metadata object does not follow the schema."""


def validate_meta(obj: Any, where: str = "sidecar") -> dict[str, Any]:
    """Return ``obj`` checked and normalised (steps as a list of dicts); raise MetaError naming the problem."""
    if not isinstance(obj, dict):
        raise MetaError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    version = obj.get("taxbreak_meta_version")
    if version != META_VERSION:
        raise MetaError(f"{where}: taxbreak_meta_version must be {META_VERSION}, got {version!r}")
    out = dict(obj)
    for key in _INT_KEYS:
        _check_count(out.get(key), f"{where}: {key}")
    for key in _STR_KEYS:
        val = out.get(key)
        if val is not None and not isinstance(val, str):
            raise MetaError(f"{where}: {key} must be a string, got {val!r}")
    if out.get("model_kind") is not None and out["model_kind"] not in MODEL_KINDS:
        raise MetaError(f"{where}: model_kind must be one of {MODEL_KINDS}, got {out['model_kind']!r}")
    if out.get("kind") is not None and out["kind"] not in KINDS:
        raise MetaError(f"{where}: kind must be one of {KINDS}, got {out['kind']!r}")
    if out.get("synthetic") is not None and not isinstance(out["synthetic"], bool):
        raise MetaError(f"{where}: synthetic must be true or false")
    if out.get("sweep") is not None:
        out["sweep"] = _validate_sweep(out["sweep"], f"{where}: sweep")
    steps = out.get("steps") or []
    if not isinstance(steps, list):
        raise MetaError(f"{where}: steps must be a list")
    norm_steps = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or not isinstance(step.get("name"), str):
            raise MetaError(f"{where}: steps[{i}] must be an object with a string 'name'")
        phase = step.get("phase")
        if phase is not None and phase not in PHASES:
            raise MetaError(f"{where}: steps[{i}].phase must be one of {PHASES}, got {phase!r}")
        tokens = step.get("tokens")
        _check_count(tokens, f"{where}: steps[{i}].tokens")
        norm = {"name": step["name"], "phase": phase, "tokens": tokens}
        if step.get("requests") is not None:
            norm["requests"] = _validate_requests(step["requests"], f"{where}: steps[{i}]")
        norm_steps.append(norm)
    out["steps"] = norm_steps
    return out


def _check_count(val: Any, what: str, *, positive: bool = False) -> None:
    """``val`` is None or an integer from 0 (1 when ``positive``) to MAX_COUNT; MetaError naming ``what``."""
    if val is None:
        return
    if isinstance(val, bool) or not isinstance(val, int) or val < (1 if positive else 0):
        raise MetaError(f"{what} must be {'a positive' if positive else 'a non-negative'} integer, got {val!r}")
    if val > MAX_COUNT:
        raise MetaError(f"{what} must be at most {MAX_COUNT}, got {val!r}")


def _validate_sweep(sweep: Any, where: str) -> dict[str, Any]:
    """The ``sweep`` block (docs/sidecar.md): ``name`` (string), ``batch_size`` and ``seq_len`` (positive
    integers), ``phase`` ('prefill' or 'decode'); all optional, other keys kept."""
    if not isinstance(sweep, dict):
        raise MetaError(f"{where} must be an object, got {type(sweep).__name__}")
    if sweep.get("name") is not None and not isinstance(sweep["name"], str):
        raise MetaError(f"{where}.name must be a string, got {sweep['name']!r}")
    for key in ("batch_size", "seq_len"):
        _check_count(sweep.get(key), f"{where}.{key}", positive=True)
    if sweep.get("phase") is not None and sweep["phase"] not in SWEEP_PHASES:
        raise MetaError(f"{where}.phase must be one of {SWEEP_PHASES}, got {sweep['phase']!r}")
    return dict(sweep)


REQUEST_PHASES = ("prefill", "decode")


def _validate_requests(reqs: Any, where: str) -> list[dict[str, Any]]:
    """A serving step's batch composition (docs/sidecar.md, ``steps[].requests[]``): one object per request in the
    step with ``request_id`` (string), ``phase`` ('prefill' or 'decode'), ``tokens`` (tokens processed this step:
    the prompt chunk in prefill, 1 in decode), ``context_tokens`` (tokens already in the request's KV cache before
    the step), optional ``tenant`` (string) and ``output_tokens`` (tokens the step emitted for it, 0 or 1)."""
    if not isinstance(reqs, list):
        raise MetaError(f"{where}.requests must be a list")
    out = []
    seen: set[str] = set()
    for j, r in enumerate(reqs):
        at = f"{where}.requests[{j}]"
        if not isinstance(r, dict) or not isinstance(r.get("request_id"), str) or not r["request_id"]:
            raise MetaError(f"{at} must be an object with a non-empty string 'request_id'")
        if r["request_id"] in seen:
            raise MetaError(f"{at}: request_id {r['request_id']!r} appears twice in the step")
        seen.add(r["request_id"])
        if r.get("phase") not in REQUEST_PHASES:
            raise MetaError(f"{at}.phase must be one of {REQUEST_PHASES}, got {r.get('phase')!r}")
        for key, required in (("tokens", True), ("context_tokens", True), ("output_tokens", False)):
            val = r.get(key)
            if val is None and not required:
                continue
            _check_count(val, f"{at}.{key}")
        if r.get("tenant") is not None and not isinstance(r["tenant"], str):
            raise MetaError(f"{at}.tenant must be a string, got {r['tenant']!r}")
        out.append(dict(r))
    return out


def sidecar_path(trace_path: str | os.PathLike[str]) -> Path:
    """``model.pt.trace.json.gz`` -> ``model.pt.trace.json.gz.meta.json`` (the suffix is appended)."""
    p = Path(trace_path)
    return p.with_name(p.name + SIDECAR_SUFFIX)


def read_sidecar(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise MetaError(f"{p}: not valid JSON ({exc})") from None
    return validate_meta(obj, str(p))


def write_sidecar(trace_path: str | os.PathLike[str], meta: dict[str, Any]) -> Path:
    """Validate ``meta`` and write it beside ``trace_path``; returns the sidecar path."""
    out = sidecar_path(trace_path)
    out.write_text(json.dumps(validate_meta(meta, str(out)), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def sidecar_update(open_sidecar: Callable[[], IO[bytes]], where: str) -> dict[str, Any]:
    """The catalogue metadata keys (``SIDECAR_KEYS``) for the sidecar ``open_sidecar()`` reads, named ``where``:
    the object when valid, else the reason (too large, not JSON, not the schema, unreadable) in
    ``taxbreak_sidecar_error``; no sidecar (FileNotFoundError) leaves the object and its source None.  Never raises:
    a bad sidecar never fails its trace.  ``taxbreak_sidecar_checked`` is always true (a None value removes a key
    where ``Lake.update_metadata`` merges these)."""
    update: dict[str, Any] = {SIDECAR_KEY: None, SIDECAR_ERROR_KEY: None, SIDECAR_SOURCE_KEY: where,
                              SIDECAR_CHECKED_KEY: True}
    try:
        with open_sidecar() as fh:
            raw = fh.read(SIDECAR_MAX_BYTES + 1)
        if len(raw) > SIDECAR_MAX_BYTES:
            raise MetaError(f"{where}: larger than {SIDECAR_MAX_BYTES} bytes; not read")
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise MetaError(f"{where}: not valid JSON ({exc})") from None
        update[SIDECAR_KEY] = validate_meta(obj, where)
    except FileNotFoundError:
        update[SIDECAR_SOURCE_KEY] = None  # none there (or removed: a stored copy goes with it)
    except MetaError as exc:
        update[SIDECAR_ERROR_KEY] = str(exc)
    except OSError as exc:
        update[SIDECAR_ERROR_KEY] = f"{where}: cannot read the sidecar ({exc.strerror or exc})"
    except Exception as exc:  # noqa: BLE001 - a store's own error (denied, network) must not fail the trace
        update[SIDECAR_ERROR_KEY] = f"{where}: cannot read the sidecar ({type(exc).__name__}: {exc})"
    return update


def side_file_errors(metadata_json: str | None) -> list[str]:
    """Why side files found beside the trace at ingest were refused, one line each, from its catalogue
    ``metadata_json``: the sidecar (``SIDECAR_ERROR_KEY``) and the request list (``REQUESTS_ERROR_KEY``,
    ``taxbreak.ingest.request_lists``). The one reader of them (``taxbreak traces``, the analysis' trace_meta)."""
    try:
        meta = json.loads(metadata_json or "{}")
    except ValueError:
        return []
    if not isinstance(meta, dict):
        return []
    return [f"{label} refused: {meta[key]}" for key, label in ((SIDECAR_ERROR_KEY, "sidecar"),
                                                             (REQUESTS_ERROR_KEY, "request list")) if meta.get(key)]


def find_meta(metadata_json: str | None, source_path: str | None) -> tuple[dict[str, Any] | None, str | None, str]:
    """The trace's taxbreak metadata and where it came from, from its catalogue row: ``metadata_json ->
    'taxbreak'`` (embedded in the trace) first, then the sidecar recorded with the trace (``'taxbreak_sidecar'``:
    read when the trace was ingested, or when the sidecar arrived later).  Returns (meta or None, source or None,
    note); an invalid object is not used and the note says why.

    Only rows written before sidecars entered at ingest (no ``taxbreak_sidecar_checked``) fall back to a sidecar
    beside the local ``source_path``; ``taxbreak ingest`` of the same file again records it in the row."""
    notes = []
    top = None
    if metadata_json:
        try:
            top = json.loads(metadata_json)
        except json.JSONDecodeError:
            top = None
        if isinstance(top, dict) and top.get("taxbreak") is not None:
            try:
                return validate_meta(top["taxbreak"], "trace metadata 'taxbreak'"), "trace_metadata", ""
            except MetaError as exc:
                notes.append(str(exc))
    stored = top.get(SIDECAR_KEY) if isinstance(top, dict) else None
    if stored is not None:
        try:
            return validate_meta(stored, "the sidecar recorded in the catalogue"), "sidecar", ""
        except MetaError as exc:
            notes.append(str(exc))
    checked = isinstance(top, dict) and bool(top.get(SIDECAR_CHECKED_KEY))
    if not checked and source_path and "://" not in source_path:  # a row from before sidecars entered at ingest
        side = sidecar_path(source_path)
        if side.is_file():
            try:
                return read_sidecar(side), "sidecar", ""
            except MetaError as exc:
                notes.append(str(exc))
    if isinstance(top, dict) and top.get(SIDECAR_ERROR_KEY):
        notes.append(str(top[SIDECAR_ERROR_KEY]))
    when = " when it was ingested" if checked else ""
    return None, None, "; ".join(notes) or f"no taxbreak metadata in the trace and no sidecar beside it{when}"
