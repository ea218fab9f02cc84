"""Step ranges where a linear rewrite could silently change a result (issue 26): int_steps' pattern matching (a
pattern's literal head and the string tests that stand in for its regex) and its nesting (pairs looked for only
inside a cluster of overlapping ranges), serving_steps' choice of the richest overlapping candidate and of the
shortest one's timing.  Every expected value is worked out by hand from the definitions in the tables' headers."""

from __future__ import annotations

from pathlib import Path

import duckdb

from taxbreak.engine import analysis
from taxbreak.engine.rules import RunConfig
from taxbreak.ingest.lake import Lake

from .scenarios import ev, write_trace

# One pattern per literal test, and the shapes that must still go to the regex (ours).
PATTERNS = [
    (10, r"^serve_step#\d+$", None, "digits"),  # head and \d+$: a string test for ASCII names
    (20, r"^Step\[Extend", "prefill", "prefix"),  # head alone (escaped '[' is literal)
    (30, r"^warmup$", None, "exact"),  # head and $
    (40, r"^alt_a\d+$|^alt_b", None, "alternation"),  # a '|' at the top level: no head, the regex decides
    (50, r"^pipe\|(x|y)\d$", None, "escaped_pipe"),  # escaped '|' in the head, '|' only inside a group
    (60, r"^opt_stepx?$", None, "quantified"),  # the head's last letter optional: no head
    (70, r"^cls[|]z\d+$", None, "bracket_pipe"),  # '|' inside a bracket class
    (80, r"^kv#\d+$", None, "kelvin"),  # a non-ASCII name goes to the regex
    (90, r"^exq_\d+_ctx_0\(", None, "seq_digits"),  # literals and \d+: the 'seq' codes (vLLM's execute_<n>_context_)
    (91, r"^exr_\d+_ctx_\d+\(.*\)_gen_0\(", None, "seq_star"),  # and '.*' before the last literal
    (92, r"^exs_\d+0x", None, "seq_backtrack"),  # a literal starting with a digit after \d+: the regex decides
]


def _names_rules(tmp_path: Path, names: list[str]) -> list[tuple[str, str | None]]:
    t = "5" * 64
    rows = [ev(t, "user_annotation", n, i * 1000, 500, "1", "1") for i, n in enumerate(names)]
    write_trace(Lake(tmp_path / "lake"), t, rows, gpu="", file_name="patterns.json")
    analysis.materialize(tmp_path / "wh.duckdb", tmp_path / "lake", tables=["int_steps"],
                         config=RunConfig(step_patterns=PATTERNS))
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    try:
        got = dict(con.execute("SELECT step_name, step_rule FROM int_steps").fetchall())
    finally:
        con.close()
    return [(n, got.get(n)) for n in names]


def test_step_patterns_literal_tests_agree_with_the_regex(tmp_path: Path) -> None:
    names = {
        "serve_step#12": "digits", "SERVE_STEP#7": "digits", "serve_step#": None, "serve_step#12x": None,
        "serve_step#12\n": None,  # RE2's $ is the end of the text, not before a final newline
        "serve_step#\u0661\u0662": None,  # Arabic-Indic digits: \d is [0-9]
        "step[extend bs=4": "prefix", "STEP[EXTEND": "prefix", "step[exten": None,
        "warmup": "exact", "WarmUp": "exact", "warmup2": None,
        "alt_a12": "alternation", "alt_b-anything": "alternation", "alt_a": None,
        "pipe|x1": "escaped_pipe", "pipe|z1": None,
        "opt_step": "quantified", "opt_stepx": "quantified",
        "cls|z9": "bracket_pipe", "clsz9": None,
        "\u212av#5": "kelvin",  # KELVIN SIGN: lower() gives 'k', RE2's case folding matches it to k
        "exq_12_ctx_0(": "seq_digits", "EXQ_3_CTX_0(abc": "seq_digits", "exq__ctx_0(": None, "exq_12_ctx_00(": None,
        "exr_1_ctx_3(a)_gen_0(": "seq_star", "exr_1_ctx_3()_gen_0(\n": "seq_star",
        "exr_1_ctx_3(a)_gen_1()_gen_0(": "seq_star",  # '.*' reaches the text's later place
        "exr_1_ctx_3(a\n)_gen_0(": None,  # RE2's '.' does not match a newline
        "exr_1_ctx_3(a)_gen_1(": None, "exr_x_ctx_3()_gen_0(": None,
        "exs_120x": "seq_backtrack", "exs_12x": None,
    }
    assert _names_rules(tmp_path, list(names)) == list(names.items())


def test_nesting_levels_twins_touching_and_crossing_ranges(tmp_path: Path) -> None:
    """Process 1: A [0, 100) holds B and its twin C [10, 40) and D [40, 60) (touching B); E [100, 150) touches A's
    end; F [140, 1000) crosses E and holds G [160, 170). Process 2: H [20, 30) inside A's time.  A range without a
    pid is left out (as the join on pid left it).  Level 1 of process 1 is A 100, E 50, F 860: F is an outlier
    (860 > 5 x median(100, 50) = 375), so G lies in one; A (others' median 455) and E (480) are not."""
    t = "6" * 64
    spans = [("A", 0, 100, "1"), ("B", 10, 30, "1"), ("C", 10, 30, "1"), ("D", 40, 20, "1"), ("E", 100, 50, "1"),
             ("F", 140, 860, "1"), ("G", 160, 10, "1"), ("H", 20, 10, "2"), ("N", 30, 5, None)]
    rows = [ev(t, "user_annotation", f"ProfilerStep#{i + 1}", ts, dur, pid, pid) for i, (_, ts, dur, pid)
            in enumerate(spans)]
    write_trace(Lake(tmp_path / "lake"), t, rows, gpu="", file_name="nested.json")
    analysis.materialize(tmp_path / "wh.duckdb", tmp_path / "lake", tables=["int_steps"])
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    try:
        got = con.execute("""SELECT step_id, step_name, step_level, is_leaf_step, is_outlier_step, in_outlier_step
                             FROM int_steps ORDER BY step_id""").fetchall()
    finally:
        con.close()
    label = {f"ProfilerStep#{i + 1}": s[0] for i, s in enumerate(spans)}
    assert [(i, label[n], lv, leaf, out, inside) for i, n, lv, leaf, out, inside in got] == [
        (1, "A", 1, False, False, False),
        (2, "B", 2, False, False, False),  # C (same span, later row) lies inside B and B inside C
        (3, "C", 3, False, False, False),  # its twin B counts among its containers, B's does not count C
        (4, "H", 1, True, False, False),
        (5, "D", 2, True, False, False),
        (6, "E", 1, True, False, False),
        (7, "F", 1, False, True, True),
        (8, "G", 2, True, False, True),
    ]


def test_serving_steps_richest_overlapping_candidate_and_shortest_timing(tmp_path: Path) -> None:
    """Process 1: SGLang's step[EXTEND] [0, 100) overlaps vLLM's execute_context_ [10, 90), the richer source: only
    that one is kept, its own timing (the shortest).  Two SGLang decode steps [100, 150) (touching the first pair,
    so not overlapping it) and [120, 140) overlap with the same richness: both kept, both timed by the shorter.
    Process 2: an execute_context_ range [0, 50) in the same time is a step of its own.  A candidate without a pid
    has no timing and is left out."""
    t = "7" * 64
    rows = [
        ev(t, "user_annotation", "step[EXTEND bs=2 toks=100]", 0, 100, "1", "1"),
        ev(t, "user_annotation", "execute_context_2(60_40)_generation_0()", 10, 80, "1", "1"),
        ev(t, "user_annotation", "step[DECODE bs=4]", 100, 50, "1", "1"),
        ev(t, "user_annotation", "step[DECODE bs=3]", 120, 20, "1", "1"),
        ev(t, "user_annotation", "execute_context_1(5)_generation_0()", 0, 50, "2", "2"),
        ev(t, "user_annotation", "step[DECODE bs=9]", 200, 50, None, None),
    ]
    write_trace(Lake(tmp_path / "lake"), t, rows, gpu="", file_name="overlaps.json")
    analysis.materialize(tmp_path / "wh.duckdb", tmp_path / "lake", tables=["serving_steps"])
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    try:
        got = con.execute("""SELECT step_id, step_name, composition_source, pid, step_ts_ns, step_end_ns,
                                    batch_requests, tokens_sum FROM serving_steps ORDER BY step_id""").fetchall()
    finally:
        con.close()
    assert got == [
        (1, "execute_context_1(5)_generation_0()", "vllm_execute_context", "2", 0, 50, 1, 5),
        (2, "execute_context_2(60_40)_generation_0()", "vllm_execute_context", "1", 10, 90, 2, 100),
        (3, "step[DECODE bs=4]", "sglang_step", "1", 120, 140, 4, 4),
        (4, "step[DECODE bs=3]", "sglang_step", "1", 120, 140, 3, 3),
    ]
