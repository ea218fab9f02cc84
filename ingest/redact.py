"""Secrets out of the catalogue and the lake: trace metadata often embeds the capture's environment (a public
Kineto trace carries an ``HF_TOKEN``), command lines carry ``--aws-secret-access-key ...``, connection URLs carry
passwords, and the warehouse is shared for ad-hoc queries.  Replaced before anything is stored: values under
secret-looking keys; in any text, values that look like known token formats, the value of a secret-looking
command-line option (``--password x``, ``--api-key=x``) or assignment (``HF_TOKEN=x``), and the password of a
URL (``postgres://admin:<redacted>@db``).

Where: ``lake.catalogue_row`` (every adapter's trace metadata) and ``Lake.publish_events`` (every adapter's
event ``args_json``, through ``redact_args``: a vectorised pre-filter, run over the bytes of groups of rows at
once and then over each row of a group it matched, so rows without anything secret-looking cost one
regular-expression scan of their bytes), and every event ``name`` / ``raw_name`` through ``redact_names``
(the same pre-filter over the distinct names; ``redact_text`` then runs once per distinct suspect name, never per
row).

What is redacted (the list docs/architecture.md repeats):

- the value under a secret-looking key: one of its words is token, secret, password, passwd, apikey, api_key,
  access_key, credential(s), auth, authorization or private_key (``HF_TOKEN``, ``db.password``, ``apiKey``), or its
  letters end in token, secret, password, passwd, pwd, apikey, accesskey, secretkey or privatekey
  (``PGPASSWORD``, ``MYSQL_PWD``, ``apitoken``; ``PWD`` / ``OLDPWD``, the working folder, are not secrets);
- in any text: token-shaped values (Hugging Face, GitHub, AWS key ids, ``sk-``, Slack, ``Bearer x``); the value
  of a secret option in both spellings (``--password x``, ``--password=x``) and of the short or bare options
  ``-p``, ``--pass``, ``--key``, ``--pw``; an assignment to a secret name (``PGPASSWORD=x``, ``GH_TOKEN=x``);
  the password of a URL, ``/`` included (``postgres://admin:<redacted>@db``);
- argv lists (a JSON array, or its text ``["--password", "x"]``): the element after a secret option;
- where: trace metadata, event ``args_json``, event names, and the catalogue's ``source_path``, ``file_name`` and
  ``error`` (URL passwords and token-shaped values there: a path is kept usable).

Not recognised: a password glued to its option (``mysql -psecret``), a secret under a key with none of the words
above."""

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
# a key whose letters end in one of these: PGPASSWORD, MYSQL_PWD, apitoken, authToken (not max_tokens)
_SECRET_SUFFIX = re.compile(r"(token|secret|password|passwd|pwd|apikey|accesskey|secretkey|privatekey)$")
_NOT_SECRET = frozenset({"pwd", "oldpwd"})  # the shell's working folders
# option names secret as a whole, not as a word of a key: -p (mysql, psql), --pass, --key, --pw
_SECRET_OPTION = frozenset({"p", "pass", "key", "pw"})
# token formats recognisable on their own: Hugging Face, GitHub, AWS access key ids, OpenAI-style, Slack
_SECRET_VALUE = re.compile(
    r"\b(hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9_-]{20,}|xox[abp]-[A-Za-z0-9-]{10,}|Bearer\s+[A-Za-z0-9._~+/-]{16,})\b"
)


_VALUE = r"""("[^"]*"|'[^']*'|[^\s"',;&|]+)"""
# --secret-option value / --secret-option=value / "--secret-option", "value" (argv as text); the option's words
# decide, as for keys; a value after a space is no other option
_OPTION = re.compile(r"""(?<![\w-])(--?[A-Za-z][\w.-]*)(=|[ \t]+(?=[^\s-])|["']\s*,\s*["'])""" + _VALUE)
# NAME=value (environment assignments, key=value lists)
_ASSIGN = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=" + _VALUE)
# scheme://user:password@host; the password may hold '/' (it ends at the first '@')
_URL_PASSWORD = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s\"']*):([^@\s\"']+)@")
# RE2 pre-filter for args_json and names: anything any rule above could act on (false positives only cost time);
# camelCase keys (accessKey, privateKey: is_secret_key splits them) and Bearer values included
_PREFILTER = (
    r"(?i)(token|secret|passw|apikey|api_key|api-key|access_key|access-key|accesskey|credential|auth|private_key|"
    r"private-key|privatekey|bearer|://[^/@\s\"]*:[^@\s\"]*@|hf_[a-z0-9]{30}|gh[pousr]_[a-z0-9]{30}|"
    r"akia[0-9a-z]{16}|sk-[a-z0-9_-]{20}|xox[abp]-|pwd|pass|key|-p[\s=\"'])"
)


def is_secret_key(key: str) -> bool:
    if _SECRET_KEY.search(_CAMEL.sub("_", key).replace("-", "_")):
        return True
    letters = re.sub(r"[^a-z0-9]", "", key.lower())
    return letters not in _NOT_SECRET and bool(_SECRET_SUFFIX.search(letters))


def is_secret_option(option: str) -> bool:
    """``option`` (``--password``, ``-p``) takes a secret value."""
    name = option.lstrip("-")
    return option.startswith("-") and (name.lower() in _SECRET_OPTION or is_secret_key(name))


def _option_sub(m: re.Match[str]) -> str:
    return f"{m.group(1)}{m.group(2)}{REDACTED}" if is_secret_option(m.group(1)) else m.group(0)


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
    if isinstance(value, list):  # an argv list: the element after a secret option is its value
        return [REDACTED if i and isinstance(value[i - 1], str) and is_secret_option(value[i - 1])
                and "=" not in value[i - 1] and v not in (None, "") else redact(v) for i, v in enumerate(value)]
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
        return pc.fill_null(pc.match_substring_regex(args, _PREFILTER), False)
    width = np.int64 if pa.types.is_large_string(args.type) else np.int32
    offsets = np.frombuffer(args.buffers()[1], dtype=width)[args.offset: args.offset + n + 1]
    firsts = np.arange(0, n, PREFILTER_GROUP_ROWS)
    bounds = np.append(offsets[firsts], offsets[n]).astype(width, copy=False)
    groups = pa.Array.from_buffers(args.type, len(firsts), [None, pa.py_buffer(bounds), args.buffers()[2]])
    matched = pc.match_substring_regex(groups, _PREFILTER).to_numpy(zero_copy_only=False)
    if not matched.any():
        return pa.array(np.zeros(n, dtype=bool))
    rows = np.repeat(matched, np.diff(np.append(firsts, n)))
    verdict = np.zeros(n, dtype=bool)
    checked = pc.match_substring_regex(pc.filter(args, pa.array(rows)), _PREFILTER)
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


def redact_names(names: pa.Array) -> pa.Array:
    """Event names (``name``, ``raw_name``) with secrets redacted; ``names`` itself when nothing needed it.

    Names repeat (a few hundred distinct in millions of rows), so the pre-filter reads each distinct name once (a
    hash pass over the rows instead of a regular-expression scan of every row's bytes: on 1 M Nsight rows 0.05 ->
    0.01 CPU-s per column), ``redact_text`` runs once per distinct suspect name and the results are put back by
    lookup, never once per row."""
    if len(names) == 0 or names.null_count == len(names):
        return names
    distinct = pc.unique(names).drop_null()
    suspect = pc.filter(distinct, _prefilter(distinct))
    if len(suspect) == 0:
        return names
    changed = [(t, c) for t in suspect.to_pylist() if (c := redact_text(t)) != t]
    if not changed:
        return names
    where = pc.index_in(names, value_set=pa.array([t for t, _ in changed], names.type))
    hit = pc.is_valid(where)
    after = pc.take(pa.array([c for _, c in changed], names.type), pc.filter(where, hit))
    return pc.replace_with_mask(names, hit, after)


def redact_location(text: str | None) -> str | None:
    """A path, URL or error message with URL passwords and token-shaped values redacted (the rest kept, so the
    path still names the file)."""
    if not text:
        return text
    text = _SECRET_VALUE.sub(REDACTED, text)
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text) if "://" in text else text
