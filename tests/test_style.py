"""No blank line directly after a `def` line or a block header (issue 25: a tool that hoisted imports to module level
left one where each import had been, between a def line and its docstring or body). Ruff's stable rules do not
catch it (its E303 is a preview rule), so this does, over every Python file git tracks."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_HEADERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.If, ast.For, ast.While, ast.With, ast.Try, ast.ExceptHandler)


def blank_after_header(src: str) -> list[int]:
    """The 1-based line numbers of header lines (ending in ':') followed directly by a blank line."""
    lines = src.splitlines()
    out = []
    for node in ast.walk(ast.parse(src)):
        if not isinstance(node, _HEADERS):
            continue
        first = node.body[0]
        start = min([first.lineno] + [d.lineno for d in getattr(first, "decorator_list", [])]) - 1
        i = start - 1
        if i < 0 or lines[i].strip():
            continue
        while i >= 0 and not lines[i].strip():
            i -= 1
        code = re.sub(r"#.*$", "", lines[i]).rstrip()
        if i >= node.lineno - 1 and code.endswith(":"):
            out.append(i + 1)
    return out


def test_the_check_finds_a_blank_line_after_a_header() -> None:
    src = "def f(x):\n\n    return x\n\n\ndef g(x):  # ok\n    if x:\n\n        return 1\n    return 2\n"
    assert blank_after_header(src) == [1, 7]
    assert blank_after_header("def f():\n    '''doc'''\n\n    return 1\n") == []  # after a docstring: fine


def test_no_blank_line_after_a_def_or_block_header() -> None:
    try:
        files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    found = [f"{f}:{n}" for f in files for n in blank_after_header((REPO / f).read_text(encoding="utf-8"))]
    assert found == []
