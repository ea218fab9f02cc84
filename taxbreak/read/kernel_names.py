"""Kernel names as readers show them: the one short-name rule (docs/method.md section 2, "A kernel's own name").

A demangled kernel name is ``[return type] qualified::name[<template arguments>](parameters)``.  Its *own name*
is the qualified function name with the return type, the template arguments and the parameter list removed
(``std::enable_if<!(false), void>::type internal::gemvx::kernel<...>(...)`` -> ``internal::gemvx::kernel``); its
*short name* folds the template arguments to ``<…>`` instead (``at::native::vectorized_elementwise_kernel<…>``).
The I_lib name rules match the own name; every reader (summary, report, plots, compare) labels kernels with the
short name and keeps the full name for hover and ``--json``.

The parse is the same few regular expressions as ``sql/int_kernel_names.sql`` (where the analyses derive the own
name for the rules), applied in the same order: operator tokens and the namespace markers ``(anonymous
namespace)`` / ``<unnamed>`` are set aside, then the innermost ``<...>`` and ``(...)`` groups are removed until
none is left, the trailing qualifiers dropped and the last space-separated word kept.
``tests/sql/test_kernel_names.py`` runs both on one table of real-world names and asserts they agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# operator tokens whose brackets are part of the name (operator(), operator[], operator<, operator->, ...): their
# bracket characters are swapped for private-use characters while the groups are removed, and swapped back after
_OPERATOR = re.compile(r"\boperator\s*(\(\)|\[\]|<<=|>>=|<=>|<<|>>|<=|>=|->\*|->|<|>)")
_BRACKETS = "()[]<>"
_MASKED = "\ue000\ue001\ue002\ue003\ue004\ue005"
_MASK = str.maketrans(_BRACKETS, _MASKED)
_UNMASK = str.maketrans(_MASKED, _BRACKETS)
# namespace markers that look like groups; set aside as single characters
_MARKERS = (("(anonymous namespace)", "\ue010"), ("<unnamed>", "\ue011"))
_TEMPLATE = re.compile(r"<[^<>()]*>")  # an innermost template-argument group (its parentheses already gone)
_PARENS = re.compile(r"\([^<>()]*\)")  # an innermost parameter / cast group
_FOLDED = "\ue020"  # a removed template-argument group
_TRAILING = re.compile(r"(\s*\[clone [^\]]*\]|\s+(const|volatile|noexcept))+\s*$")
MAX_PASSES = 64


def _parsed(name: str) -> str:
    """The last word of the name with its groups removed (template groups as one ``_FOLDED`` mark each)."""
    s = name.strip()
    for text, mark in _MARKERS:
        s = s.replace(text, mark)
    s = _OPERATOR.sub(lambda m: "operator" + m.group(1).translate(_MASK), s)
    for _ in range(MAX_PASSES):
        t = _PARENS.sub("", _TEMPLATE.sub(_FOLDED, s))
        if t == s:
            break
        s = t
    s = _TRAILING.sub("", s)
    words = s.split()
    return words[-1] if words else s


def _restored(s: str) -> str:
    for text, mark in _MARKERS:
        s = s.replace(mark, text)
    return s.translate(_UNMASK)


def own_name(name: str) -> str:
    """The qualified function name: return type, template arguments and parameters removed."""
    return _restored(_parsed(name).replace(_FOLDED, ""))


def short_name(name: str) -> str:
    """The own name with each template-argument group folded to ``<…>``: the label every reader shows."""
    return _restored(_parsed(name).replace(_FOLDED, "<…>"))


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOISE = {"void", "const", "at", "native", "c10", "std", "detail", "cuda", "anonymous", "namespace", "ul", "lambda",
          "operator", "unnamed", "int", "unsigned", "long", "bool", "instance"}


def short_names(names: Iterable[str]) -> dict[str, str]:
    """full name -> a label unique within ``names``: ``short_name``, and where several names share it, the
    identifiers of the full name that tell it apart from the others (``at::native::elementwise_kernel<…>
    [direct_copy_kernel_cuda · BFloat16]``), then a number as the last resort.  Every listing of several kernels
    (top kernels, fusion chains, plots) labels them with this, so two different kernels never read the same."""
    out = {n: short_name(n) for n in dict.fromkeys(names)}
    groups: dict[str, list[str]] = {}
    for n, s in out.items():
        groups.setdefault(s, []).append(n)
    for short, group in groups.items():
        if len(group) < 2:
            continue
        own = set(_IDENT.findall(short))
        idents = {n: [w for w in dict.fromkeys(_IDENT.findall(n)) if w not in _NOISE and w not in own]
                  for n in group}
        sets = {n: set(v) for n, v in idents.items()}
        for n in group:
            open_ = [m for m in group if m != n]  # names not yet told apart from n
            chosen: list[str] = []
            for w in idents[n]:
                if not open_ or len(chosen) == 3:
                    break
                if any(w not in sets[m] for m in open_):
                    chosen.append(w)
                    open_ = [m for m in open_ if w in sets[m]]
            out[n] = f"{short} [{' · '.join(chosen)}]" if chosen else short
        seen: dict[str, int] = {}
        for n in group:  # still equal (names differing only in numbers or punctuation): number them
            seen[out[n]] = seen.get(out[n], 0) + 1
        count: dict[str, int] = {}
        for n in group:
            if seen[out[n]] > 1:
                count[out[n]] = count.get(out[n], 0) + 1
                out[n] = f"{out[n]} #{count[out[n]]}"
    return out
