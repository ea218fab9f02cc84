"""The analysis invariants (``sql/checks/*.sql``, ``taxbreak.engine.checks``) as Dagster asset checks.

Each check belongs to the table it guards; an error-severity one is blocking.  They are evaluated by the engine
(``taxbreak.engine.runner.run``) on the run's rows before its publication commits, as for every other writer: a broken
invariant fails the ``analysis_tables`` step and rolls the run back, so nothing of that trace is published (tables,
marts, snapshot), its partition of the tables stays unmaterialised and the assets downstream (cross-trace tables,
exports, report, what-if) do not run.  Here they only become check specs and check results.
"""

import dagster as dg

from taxbreak.engine.checks import CheckResult, check_files, markdown_preview

__all__ = ["check_specs", "markdown_preview", "results"]


def check_specs(tables: list[str]) -> list[dg.AssetCheckSpec]:
    """The checks of the tables present in ``tables``, blocking where their severity is error."""
    return [dg.AssetCheckSpec(name=c.name, asset=dg.AssetKey(c.table), description=c.description,
                              blocking=c.blocking) for c in check_files() if c.table in tables]


def results(evaluated: list[CheckResult]) -> list[dg.AssetCheckResult]:
    """The engine's check results as Dagster's."""
    return [dg.AssetCheckResult(
        asset_key=r.table, check_name=r.name, passed=r.passed,
        severity=dg.AssetCheckSeverity.ERROR if r.check.blocking else dg.AssetCheckSeverity.WARN,
        metadata={"rows_checked": r.rows_checked, "violations": r.violations,
                  "examples": dg.MetadataValue.md(r.sample)},
    ) for r in evaluated]
