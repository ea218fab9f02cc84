"""Are two warehouses' tables identical?  Every table both hold, compared row for row in both directions (EXCEPT ALL),
over the columns both have; prints one line per table and exits 1 when one differs.

Used to show that a change of code leaves every table as it was (issue 25): build a warehouse from the same inputs
with the old and the new checkout, then

    python bench/table_identity.py OLD.duckdb NEW.duckdb [--ignore run_spec.capture_ts_ns ...]

``--ignore TABLE.COLUMN`` leaves out a column that depends on when the run happened (a trace without a capture time
takes its ingest time: run_spec.capture_ts_ns, workload_trends.capture_ts_ns).
"""

from __future__ import annotations

import argparse
import sys

import duckdb


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def compare(old: str, new: str, ignore: set[str]) -> int:
    con = duckdb.connect()
    con.execute("ATTACH $p AS o (READ_ONLY)", {"p": old})
    con.execute("ATTACH $p AS n (READ_ONLY)", {"p": new})

    def columns(db: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t, c in con.execute("SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = $d AND "
                                "schema_name = 'main' ORDER BY table_name, column_index", {"d": db}).fetchall():
            out.setdefault(t, []).append(c)
        return out

    co, cn = columns("o"), columns("n")
    differing = 0
    for t in sorted(set(co) | set(cn)):
        if t not in co or t not in cn:
            print(f"{t:<28} only in {'the old' if t in co else 'the new'} warehouse  <-- DIFFERS")
            differing += 1
            continue
        cols = [c for c in co[t] if c in cn[t] and f"{t}.{c}" not in ignore]
        sel = ", ".join(map(_q, cols))
        a, b = (con.execute(f"SELECT count(*) FROM (SELECT {sel} FROM {x}.main.{_q(t)} EXCEPT ALL "
                            f"SELECT {sel} FROM {y}.main.{_q(t)})").fetchone()[0] for x, y in (("o", "n"), ("n", "o")))
        rows = con.execute(f"SELECT count(*) FROM n.main.{_q(t)}").fetchone()[0]
        extra = sorted(set(co[t]) ^ set(cn[t]))
        bad = a or b or extra
        differing += bool(bad)
        print(f"{t:<28} rows {rows:>10,}  old-not-new {a:>7,}  new-not-old {b:>7,}  columns {len(cols)}"
              + (f"  columns in one only: {extra}" if extra else "") + ("  <-- DIFFERS" if bad else ""))
    print(f"{len(set(co) | set(cn))} tables, {differing} differing")
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--ignore", action="append", default=[], metavar="TABLE.COLUMN")
    args = ap.parse_args(argv)
    return compare(args.old, args.new, set(args.ignore))


if __name__ == "__main__":
    sys.exit(main())
