"""docs/warehouse.md is generated from the sql/ headers and stays in sync; every example query runs."""

from __future__ import annotations

import duckdb
import pytest

from taxbreak.engine.plan import sql_files
from taxbreak.read.docgen import DOC_PATH, example_queries, generate, split_unit

QUERIES = example_queries()


def test_committed_doc_equals_generated() -> None:
    assert DOC_PATH.read_text(encoding="utf-8") == generate(), "run `python -m taxbreak.read.docgen` and commit"


def test_doc_carries_every_table_and_column() -> None:
    text = DOC_PATH.read_text(encoding="utf-8")
    for f in sql_files():
        assert f"### {f.name}\n" in text
        for col in f.columns:
            assert f"| `{col}` |" in text


def test_units_split() -> None:
    assert split_unit("sum of kernel durations (ns)") == ("sum of kernel durations", "ns")
    assert split_unit("kernels / output_tokens, paper-compatible (kernels per token)") == (
        "kernels / output_tokens, paper-compatible", "kernels per token")
    assert split_unit("'sync_drain', 'memcpy' (see above) or 'other'") == (
        "'sync_drain', 'memcpy' (see above) or 'other'", "")


def test_there_are_a_dozen_queries() -> None:
    assert len(QUERIES) >= 12


@pytest.mark.parametrize("q", QUERIES, ids=[q.name for q in QUERIES])
def test_example_query_runs(wh: dict, q) -> None:  # noqa: ANN001
    con = duckdb.connect(str(wh["warehouse"]), read_only=True)
    try:
        rel = con.sql(q.sql)
        cols = rel.columns
        rows = rel.fetchall()
    finally:
        con.close()
    assert cols
    if q.name == "08_orphan_kernels" and "mock" not in wh["ids"]:
        pytest.skip("it ran; only the public traces (../shared/traces/public, absent) have orphan kernels")
    assert rows, f"{q.path} returned no rows on the test warehouse"
