"""The analysis invariants (``sql/checks/*.sql``, ``taxbreak.engine.checks``) as Dagster asset checks.

The one check that is not an invariant: ``no_regression_in_landed_runs`` on ``workload_changes`` (issue 28), which
warns when a run the step's run analysed takes part in a regression of its workload (``taxbreak.read.trend.
regressions_in``), with the figures in its metadata.  It never blocks.

Each check belongs to the table it guards; an error-severity one is blocking.  They are evaluated by the engine
(``taxbreak.engine.runner.run``) on the run's rows before its publication commits, as for every other writer: a broken
invariant fails the ``analysis_tables`` step and rolls the run back, so nothing of that trace is published (tables,
marts, snapshot), its partition of the tables stays unmaterialised and the assets downstream (cross-trace tables,
exports, report, what-if) do not run.  Here they only become check specs and check results.
"""

import dagster as dg

from taxbreak.engine.checks import CheckResult, check_files, markdown_preview
from taxbreak.read.trend import format_regression

__all__ = ["REGRESSION_CHECK", "check_specs", "markdown_preview", "regression_result", "regression_spec", "results"]

REGRESSION_CHECK = "no_regression_in_landed_runs"
REGRESSIONS_ASSET = "workload_changes"


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


def regression_spec() -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        name=REGRESSION_CHECK, asset=dg.AssetKey(REGRESSIONS_ASSET), blocking=False,
        description="Warns when a run this step analysed takes part in a regression of its workload: a change point "
        "(docs/method.md 'Trends and regressions', ours) at that run or one of the trends.confirm_runs - 1 before "
        "it, direction 'regression'. The metadata lists each with its figure, change and what moved with it.")


def regression_result(rows: list[dict], scope: str) -> dg.AssetCheckResult:
    """WARN with the regressions ``rows`` (taxbreak.read.trend.regressions_in); passed when there are none."""
    head = "| workload | run | file | figure | change | status | baseline median | z | moved with it |"
    lines = [head, "|" + "---|" * 9]
    for c in rows:
        z = "n/a" if c["robust_z"] is None else f"{c['robust_z']:.1f}"
        lines.append(f"| {c['workload_id']} | {c['run_seq']} | {c['file_name']} | {c['figure']} | "
                     f"{100 * c['rel_change']:+.1f}% | {c['status']} | {c['baseline_median']:,.0f} | {z} | "
                     f"{', '.join(c['components_moved'] or []) or '-'} |")
    return dg.AssetCheckResult(
        asset_key=REGRESSIONS_ASSET, check_name=REGRESSION_CHECK, passed=not rows,
        severity=dg.AssetCheckSeverity.WARN,
        description=(f"{len(rows)} regression(s) in the runs of {scope}: " + "; ".join(map(format_regression, rows))
                     if rows else f"no regression in the runs of {scope}"),
        metadata={"regressions": len(rows), "scope": scope,
                  "workloads": sorted({c["workload_id"] for c in rows}),
                  "figures": sorted({c["figure"] for c in rows}),
                  "max_rel_change": max((c["rel_change"] for c in rows), default=0.0),
                  "details": dg.MetadataValue.md("\n".join(lines) if rows else "none")})
