"""Secrets out of the catalogue and the lake: trace metadata often embeds the capture's environment (a public
Kineto trace carries an ``HF_TOKEN``), command lines carry ``--aws-secret-access-key ...``, connection URLs carry
passwords, and the warehouse is shared for ad-hoc queries.  Replaced before anything is stored: values under
secret-looking keys; in any text, values that look like known token formats, the value of a secret-looking
command-line option (``--password x``, ``--api-key=x``) or assignment (``HF_TOKEN=x``), and the password of a
URL (``postgres://admin:<redacted>@db``).

Where: ``lake.catalogue_row`` (every adapter's trace metadata) and ``Lake.publish_events`` (every adapter's
event ``args_json``, through ``redact_args``: a vectorised pre-filter, run over the bytes of groups of rows at
once and then over each row of a group it matched, so rows without anything secret-looking cost one
regular-expression scan of their bytes)."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REDACTED = "<redacted>"
# a key whose words include one of these (HF_TOKEN, AWS_SECRET_ACCESS_KEY, db.password, apiKey), not
# TOKENIZERS_PARALLELISM: the secret word must be a whole word of the key
_SECRET_KEY = re.compile(
    r"(?:^|[^a-z0-9])(token|secret|password|passwd|apikey|api_key|access_key|credentials?|auth|authorization|private_key)(?:$|[^a-z0-9])",
    re.IGNORECASE,
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# token formats recognisable on their own: Hugging Face, GitHub, AWS access key ids, OpenAI-style, Slack
_SECRET_VALUE = re.compile(
    r"\b(hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9_-]{20,}|xox[abp]-[A-Za-z0-9-]{10,}|Bearer\s+[A-Za-z0-9._~+/-]{16,})\b"
)


_VALUE = r"""("[^"]*"|'[^']*'|[^\s"',;&|]+)"""
# --secret-option value / --secret-option=value (the option's words decide, as for keys)
_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.-]*)(=|[ \t]+)" + _VALUE)
# NAME=value (environment assignments, key=value lists)
_ASSIGN = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=" + _VALUE)
# scheme://user:password@host
_URL_PASSWORD = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s\"']*):([^@/\s\"']+)@")
# RE2 pre-filter for args_json: anything any rule above could act on (false positives only cost time); camelCase
# keys (accessKey, privateKey: is_secret_key splits them) and Bearer values included
_ARGS_PREFILTER = (
    r"(?i)(token|secret|passw|apikey|api_key|api-key|access_key|access-key|accesskey|credential|auth|private_key|"
    r"private-key|privatekey|bearer|://[^/@\s\"]*:[^@/\s\"]*@|hf_[a-z0-9]{30}|gh[pousr]_[a-z0-9]{30}|"
    r"akia[0-9a-z]{16}|sk-[a-z0-9_-]{20}|xox[abp]-)"
)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(_CAMEL.sub("_", key).replace("-", "_")))


def _option_sub(m: re.Match[str]) -> str:
    return f"{m.group(1)}{m.group(2)}{REDACTED}" if is_secret_key(m.group(1).lstrip("-")) else m.group(0)


def _assign_sub(m: re.Match[str]) -> str:
    return f"{m.group(1)}={REDACTED}" if is_secret_key(m.group(1)) else m.group(0)


def redact_text(text: str) -> str:
    """``text`` with token-shaped values, secret options and assignments, and URL passwords redacted."""
    text = _SECRET_VALUE.sub(REDACTED, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
    if "-" in text:
        text = _OPTION.sub(_option_sub, text)
    if "=" in text:
        text = _ASSIGN.sub(_assign_sub, text)
    return text


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like: dicts, lists, scalars) with secrets replaced by ``<redacted>``."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_key(str(k)) and value[k] not in (None, "") else redact(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def _redact_json_text(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return redact_text(text)
    clean = redact(value)
    if clean == value:
        return text
    return json.dumps(clean, ensure_ascii=False, separators=(",", ":"))


# rows whose bytes the pre-filter reads as one value first (a batch of 65,536 rows: 256 values instead of 65,536)
PREFILTER_GROUP_ROWS = 256


def _prefilter(args: pa.Array) -> pa.Array:
    """The pre-filter's verdict per row of ``args`` (False for NULL), without a regular-expression call per row.

    The values' bytes are contiguous, so each group of ``PREFILTER_GROUP_ROWS`` rows is read as one value (offsets
    taken from every group's first row, the same data buffer: nothing copied).  The pre-filter has no anchors and
    no word boundaries, so a match inside one row is a match inside its group; a match across two rows only sends
    the group to the per-row check.  Only the rows of groups that matched are checked one by one."""
    n = len(args)
    if not (pa.types.is_string(args.type) or pa.types.is_large_string(args.type)) or args.buffers()[2] is None:
        return pc.fill_null(pc.match_substring_regex(args, _ARGS_PREFILTER), False)
    width = np.int64 if pa.types.is_large_string(args.type) else np.int32
    offsets = np.frombuffer(args.buffers()[1], dtype=width)[args.offset: args.offset + n + 1]
    firsts = np.arange(0, n, PREFILTER_GROUP_ROWS)
    bounds = np.append(offsets[firsts], offsets[n]).astype(width, copy=False)
    groups = pa.Array.from_buffers(args.type, len(firsts), [None, pa.py_buffer(bounds), args.buffers()[2]])
    matched = pc.match_substring_regex(groups, _ARGS_PREFILTER).to_numpy(zero_copy_only=False)
    if not matched.any():
        return pa.array(np.zeros(n, dtype=bool))
    rows = np.repeat(matched, np.diff(np.append(firsts, n)))
    verdict = np.zeros(n, dtype=bool)
    checked = pc.match_substring_regex(pc.filter(args, pa.array(rows)), _ARGS_PREFILTER)
    verdict[rows] = pc.fill_null(checked, False).to_numpy(zero_copy_only=False)
    return pa.array(verdict)


def redact_args(args: pa.Array) -> pa.Array:
    """``args_json`` values (JSON text) with secrets redacted; ``args`` itself when nothing needed it."""
    if len(args) == 0 or args.null_count == len(args):
        return args
    suspect = _prefilter(args)
    if not pc.any(suspect).as_py():
        return args
    before = pc.filter(args, suspect).to_pylist()
    after = [_redact_json_text(t) for t in before]
    if after == before:
        return args
    return pc.replace_with_mask(args, suspect, pa.array(after, args.type))
