"""`make demo` on a fresh clone: the time to its first summary line beside the time of its `pip install`.

    python bench/bench_demo.py                 # clone HEAD into a temporary folder, set up, run the demo
    python bench/bench_demo.py --keep /tmp/x   # keep the clone (its .venv, its warehouse/) for a look afterwards

Issue 27: a newcomer's first minute.  The clone is of the committed HEAD (uncommitted changes are not in it) and
has no ``../shared`` beside it, as a fresh clone on a new machine.  Two steps, each timed as a whole process tree
(wall, and the CPU time of the step and its children from ``os.wait4``):

1. the set-up step of ``make demo``: ``make .venv/.taxbreak-installed`` (venv, ``pip install`` of the pinned files,
   the editable install of the package).  pip takes its wheels from this machine's cache and local indexes, so the
   figure is a warm-cache install: a machine that downloads them takes longer, which only lowers the ratio below.
2. ``make demo`` itself (the stamp is fresh, so nothing is installed again): the time until the first summary line
   (the first ``VERDICT`` line, the verdict of the first trace) and until it ends.

The figure is the ratio of (2) to (1), both measured in the same run on the same machine; absolute times move with
the machine and its load (printed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from run_all import machine  # noqa: E402  (bench/ is not a package: the machine line is run_all's)

FIRST_SUMMARY_MARK = "VERDICT"


def _timed(name: str, cmd: list[str], cwd: Path, env: dict[str, str], mark: str | None = None) -> dict:
    """Run ``cmd``; its wall and CPU seconds (children included) and, with ``mark``, the seconds until the first
    stdout line holding it.  Its output goes to a log beside the clone; a failure raises with the log's tail."""
    log = cwd.parent / f"{name}.log"
    t0 = time.perf_counter()
    first_s = None
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            if mark is not None and first_s is None and mark in line:
                first_s = time.perf_counter() - t0
        _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd} (log {log}):\n{tail}")
    return {"wall_s": wall_s, "cpu_s": usage.ru_utime + usage.ru_stime, "first_s": first_s, "log": str(log)}


def measure_demo(keep: Path | None = None) -> dict:
    """Clone HEAD, time its set-up and its ``make demo``; returns both steps' figures (``bench/run_all.py`` calls
    this too: its ``demo`` section)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    base = keep or Path(tempfile.mkdtemp(prefix="taxbreak-fresh-"))
    base.mkdir(parents=True, exist_ok=True)
    clone = base / "taxbreak"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    # a clean environment for make: no venv of ours active, the demo writes under the clone's own warehouse/
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TAXBREAK_HOME", "PYTHONPATH")}
    try:
        print(f"fresh clone of {head} in {clone}; set-up ...", file=sys.stderr)
        setup = _timed("setup", ["make", ".venv/.taxbreak-installed"], clone, env)
        print("make demo ...", file=sys.stderr)
        demo = _timed("demo", ["make", "demo"], clone, env, mark=FIRST_SUMMARY_MARK)
        if demo["first_s"] is None:
            raise SystemExit(f"make demo printed no {FIRST_SUMMARY_MARK} line (log {demo['log']})")
    finally:
        if keep is None:
            subprocess.run(["rm", "-rf", str(base)], check=False)
    return {"commit": head, "setup": setup, "demo": demo}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="clone into this (new) folder and keep it")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    res = measure_demo(args.keep)
    setup, demo = res["setup"], res["demo"]
    load1 = os.getloadavg()[0]
    print(f"machine: {machine()}")
    print(f"load average {load0:.1f} before, {load1:.1f} after; fresh clone of {res['commit']}, no ../shared beside it")
    print(f"set-up (make .venv/.taxbreak-installed: venv + pip install, warm pip cache): "
          f"{setup['wall_s']:.1f} s (CPU {setup['cpu_s']:.1f} s)")
    print(f"make demo to its first summary line ({FIRST_SUMMARY_MARK}): {demo['first_s']:.1f} s = "
          f"{demo['first_s'] / setup['wall_s']:.2f}x the set-up")
    print(f"make demo in all: {demo['wall_s']:.1f} s (CPU {demo['cpu_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
