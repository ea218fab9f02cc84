"""The analysis invariants (docs/method.md) as SQL files beside the tables they guard: ``sql/checks/*.sql``.

Each file holds one SELECT of the rows that break one rule, with a header in the style of the tables' (parsed by
``taxbreak.engine.plan.header``, the one header parser)::

    -- check: <name>               (must equal the file name)
    -- guards: <table>             (the table whose rows it judges: the Dagster asset the check belongs to)
    -- reads: a, b                 (the tables it reads; a run without one of them passes with 0 rows checked)
    -- severity: error | warn      (error: a broken rule stops the run before anything is published)
    -- description: ...

Every writer of the analysis tables (``taxbreak.engine.runner.run``) evaluates them on the run's computed rows, before
its
publication commits: in a run for some traces on the run's own file (its tables hold those traces' rows only), in a
run over every trace inside the run's transaction.  A broken error-severity check raises ``InvariantBroken``:
nothing of the run is published (tables, marts, snapshot).  Dagster shows each check as a blocking asset check of
the table it guards (``taxbreak.pipeline.defs.checks``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb

from taxbreak.engine.plan import SQL_DIR, header

CHECKS_DIR = SQL_DIR / "checks"
CHECK_KEYS = ("check", "guards", "reads", "severity", "description")
SEVERITIES = ("error", "warn")
SAMPLE_ROWS = 5  # violating rows shown with a broken check


@dataclasses.dataclass(frozen=True)
class Check:
    """One ``sql/checks/*.sql`` file."""

    name: str
    path: Path
    text: str
    table: str  # the table it guards
    reads: tuple[str, ...]
    severity: str
    description: str

    @property
    def blocking(self) -> bool:
        return self.severity == "error"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """A check evaluated on a connection's tables: rows of the guarded table checked, rows breaking the rule."""

    check: Check
    rows_checked: int
    violations: int
    sample: str  # the first violating rows as a Markdown table; "none", or why nothing was checked

    @property
    def name(self) -> str:
        return self.check.name

    @property
    def table(self) -> str:
        return self.check.table

    @property
    def passed(self) -> bool:
        return self.violations == 0

    @property
    def blocks(self) -> bool:
        """A broken error-severity check: the run must not publish."""
        return not self.passed and self.check.blocking

    def message(self) -> str:
        return (f"check {self.name} ({CHECKS_DIR.name}/{self.check.path.name}) on table {self.table}: "
                f"{self.violations:,} of {self.rows_checked:,} row(s) break it ({self.check.description})")


class InvariantBroken(RuntimeError):
    """An error-severity check found rows that break it; nothing of the run was published."""

    def __init__(self, scope: str, results: list[CheckResult]) -> None:
        self.scope = scope
        self.results = results
        broken = [r for r in results if r.blocks]
        super().__init__(f"{scope}: invariant(s) broken, nothing published (the tables, marts and snapshot stay as "
                         "they were): " + "; ".join(r.message() for r in broken))

    @property
    def broken(self) -> list[CheckResult]:
        return [r for r in self.results if r.blocks]


def parse_check_file(path: Path) -> Check:
    text = path.read_text(encoding="utf-8")
    fields: dict[str, str] = {}
    for key, val in header(text, CHECK_KEYS):
        fields.setdefault(key, val)
    if fields.get("check", path.stem) != path.stem:
        raise ValueError(f"{path}: '-- check: {fields['check']}' does not match the file name")
    for key in ("guards", "severity", "description"):
        if not fields.get(key):
            raise ValueError(f"{path}: no '-- {key}:' line")
    if fields["severity"] not in SEVERITIES:
        raise ValueError(f"{path}: '-- severity: {fields['severity']}' is not one of {', '.join(SEVERITIES)}")
    reads = tuple(r.strip() for r in fields.get("reads", fields["guards"]).split(",") if r.strip())
    return Check(name=path.stem, path=path, text=text, table=fields["guards"], reads=reads,
                 severity=fields["severity"], description=fields["description"])


def check_files(checks_dir: Path | None = None) -> list[Check]:
    """Every check, by name."""
    return [parse_check_file(p) for p in sorted((checks_dir or CHECKS_DIR).glob("*.sql"))]


def markdown_preview(con: duckdb.DuckDBPyConnection, table: str, limit: int = SAMPLE_ROWS) -> str:
    """The first rows of a table or view as a Markdown table (asset metadata, the check's sample)."""
    rel = con.table(table).limit(limit)
    lines = ["| " + " | ".join(rel.columns) + " |", "|" + "---|" * len(rel.columns)]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rel.fetchall()]
    return "\n".join(lines)


def _present(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The tables and views the connection's statements resolve (a run's temporary tables shadow the warehouse's)."""
    return {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() UNION ALL SELECT view_name FROM duckdb_views() "
        "WHERE NOT internal").fetchall()}


def evaluate_check(con: duckdb.DuckDBPyConnection, check: Check, present: set[str] | None = None) -> CheckResult:
    """One check on the connection's tables; a table it reads that is not built yet: 0 rows checked, passed."""
    present = _present(con) if present is None else present
    missing = [t for t in check.reads if t not in present]
    if check.table not in present or missing:
        return CheckResult(check, 0, 0, "table not built yet")
    (checked,) = con.table(check.table).count("*").fetchall()[0]
    con.execute(f"CREATE OR REPLACE TEMP VIEW _violations AS {check.text}")  # fixed text from sql/checks, no values
    try:
        (bad,) = con.execute("SELECT count(*) FROM _violations").fetchall()[0]
        sample = markdown_preview(con, "_violations") if bad else "none"
    finally:
        con.execute("DROP VIEW IF EXISTS _violations")
    return CheckResult(check, int(checked), int(bad), sample)


def evaluate(con: duckdb.DuckDBPyConnection, selected: set[str] | None = None,
             checks: list[Check] | None = None) -> list[CheckResult]:
    """The checks (``selected`` names; None: every one) on the connection's tables."""
    present = _present(con)
    return [evaluate_check(con, c, present) for c in (checks if checks is not None else check_files())
            if selected is None or c.name in selected]
