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
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

META_VERSION = 1
SIDECAR_SUFFIX = ".meta.json"
KINDS = ("generation", "null_kernel", "sweep_point")
PHASES = ("prefill", "decode", "mixed", "other")
MODEL_KINDS = ("dense", "moe")

_INT_KEYS = ("batch_size", "prompt_len", "output_tokens")
_STR_KEYS = ("model", "dtype", "device", "gpu_name")


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
        val = out.get(key)
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
            raise MetaError(f"{where}: {key} must be a non-negative integer, got {val!r}")
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
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
            raise MetaError(f"{where}: steps[{i}].tokens must be a non-negative integer, got {tokens!r}")
        norm = {"name": step["name"], "phase": phase, "tokens": tokens}
        if step.get("requests") is not None:
            norm["requests"] = _validate_requests(step["requests"], f"{where}: steps[{i}]")
        norm_steps.append(norm)
    out["steps"] = norm_steps
    return out


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
            if isinstance(val, bool) or not isinstance(val, int) or val < 0:
                raise MetaError(f"{at}.{key} must be a non-negative integer, got {val!r}")
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


def find_meta(metadata_json: str | None, source_path: str | None) -> tuple[dict[str, Any] | None, str | None, str]:
    """The trace's taxbreak metadata and where it came from: the catalogue's ``metadata_json -> 'taxbreak'``
    first, then a sidecar beside the (local) source file, then the sidecar recorded in the catalogue when it
    arrived (``metadata_json -> 'taxbreak_sidecar'``).  Returns (meta or None, source or None, note); an invalid
    object is not used and the note says why."""
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
    if source_path and "://" not in source_path:
        side = sidecar_path(source_path)
        if side.is_file():
            try:
                return read_sidecar(side), "sidecar", ""
            except MetaError as exc:
                notes.append(str(exc))
    # a sidecar recorded in the catalogue when it arrived (taxbreak.pipeline.bucket.apply_sidecar; the only way
    # for an object-store bucket, whose sidecar is not beside a local path)
    stored = top.get("taxbreak_sidecar") if isinstance(top, dict) else None
    if stored is not None:
        try:
            return validate_meta(stored, "the sidecar recorded in the catalogue"), "sidecar", ""
        except MetaError as exc:
            notes.append(str(exc))
    if isinstance(top, dict) and top.get("taxbreak_sidecar_error"):
        notes.append(str(top["taxbreak_sidecar_error"]))
    return None, None, "; ".join(notes) or "no taxbreak metadata in the trace and no sidecar beside it"
