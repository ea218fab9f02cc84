"""Secrets out of the catalogue: trace metadata often embeds the capture's environment (a public Kineto trace
carries an ``HF_TOKEN``), and the warehouse is shared for ad-hoc queries.  Values under secret-looking keys, and
values that look like known token formats under any key, are replaced before metadata is stored."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
# a key whose words include one of these (HF_TOKEN, AWS_SECRET_ACCESS_KEY, db.password, apiKey), not
# TOKENIZERS_PARALLELISM: the secret word must be a whole word of the key
_SECRET_KEY = re.compile(
    r"(?:^|[^a-z0-9])(token|secret|password|passwd|apikey|api_key|access_key|credentials?|auth|private_key)(?:$|[^a-z0-9])",
    re.IGNORECASE,
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# token formats recognisable on their own: Hugging Face, GitHub, AWS access key ids, OpenAI-style, Slack
_SECRET_VALUE = re.compile(
    r"\b(hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9_-]{20,}|xox[abp]-[A-Za-z0-9-]{10,})\b"
)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(_CAMEL.sub("_", key)))


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like: dicts, lists, scalars) with secrets replaced by ``<redacted>``."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_key(str(k)) and value[k] not in (None, "") else redact(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return _SECRET_VALUE.sub(REDACTED, value)
    return value
