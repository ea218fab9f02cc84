"""The reliability suite (issue 13), whole: every hostile input of the corpus, kills at each injected point and at
random times (ingest, analyze, analyze --trace, forget), concurrent ingests, analyze racing forget, a file replaced
during its ingest, odd S3 keys (moto), analyses that must flag,
ordinary faults (full disks, read-only or refused folders, a vanished lake, a replayed failure) and what readers
are owed (one snapshot per session, markup in kernel names, links, a forged manifest, the sandbox) (issue 30).
Prints one table: inputs tried, stored as expected, clear errors, unclear errors, crashes, hangs, silent wrong
results, secrets kept, data lost, leftovers, escapes; exits 1 unless every bad column is zero.  ``make test`` runs
a fast subset (``tests/reliability/test_reliability.py``); the suite itself is ``tests/reliability/suite.py``.

    python bench/reliability.py                      # ~13 minutes on 2 busy cores (746 s, 157 rows)
    python bench/reliability.py --random-kills 30 --processes 6 --rounds 3 -v
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the suite lives with the tests (tests/reliability)

from reliability import suite  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--random-kills", type=int, default=10, help="kills at random times per crash target")
    ap.add_argument("--processes", type=int, default=4, help="concurrent ingests of one folder")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of concurrent ingests")
    ap.add_argument("--fast", action="store_true", help="the subset the test suite runs, small inputs")
    ap.add_argument("--work", type=Path, help="keep the inputs and lakes here (default: a temporary folder)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per input or run")
    args = ap.parse_args(argv)
    log = print if args.verbose else (lambda s: None)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="taxbreak-reliability-") as tmp:
        work = args.work or Path(tmp)
        tallies = suite.run_all(work, fast=args.fast, random_kills=args.random_kills, processes=args.processes,
                                rounds=args.rounds, log=log)
    print(suite.table(tallies))
    print(f"crash targets: {', '.join(suite.CRASH_TARGETS)}; {time.perf_counter() - t0:.0f} s")
    notes = [n for t in tallies for n in t.notes]
    for n in notes:
        print("  " + n)
    return 1 if notes else 0


if __name__ == "__main__":
    raise SystemExit(main())
