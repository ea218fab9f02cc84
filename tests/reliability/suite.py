"""The reliability suite (issue 13): hostile inputs, kills at random and at injected points, concurrent writers,
S3 oddities; each outcome classified, totals printed as one table by ``bench/reliability.py`` and checked (a
fast subset) by ``tests/reliability/test_reliability.py``.

Outcomes, per input or run:

- ``ok``: stored as expected (hand-computed event and skipped counts; no impossible value, no secret in the lake);
- ``clear error``: refused or recorded with the expected status and an error naming the file and the problem;
- ``unclear error``: refused, but the message does not name the file or the problem, or names a temporary file;
- ``crash``: an exception escaped, or the process died on its own; ``hang``: past its time limit;
- ``silent wrong``: stored although it should fail, other counts than expected, an impossible value, a count or
  note missing from the stored metadata, or a state a reader can see that is inconsistent (a trace 'ingested'
  without readable events), or an analysis that should flag a trace and does not;
- ``secrets kept``: a planted secret found anywhere in the catalogue row or the events (names and args);
- ``data lost``: a good file next to the hostile one not stored, or after a kill and a re-run the lake differs
  from a clean run's (checksum of every catalogue row and events file);
- ``leftover``: temporary files or staging folders of a dead process still there after the next run;
- ``escapes``: something hostile got out of its room: a kernel name read as markup by the report's page (its
  timeline left undrawn), a reader's query that wrote a file a writer reads, a forged manifest a writer acted on
  outside the marts folder.

Ordinary faults (issue 30 item 4: a full disk, a read-only or refused folder, the lake removed during a run) are
``clear error`` when the command prints one line naming the path, the cause and what to do, exits 1 and leaves
what a reader sees as it was, and the command goes through once the fault is gone; ``data lost`` when the failed
command changed that state; ``unclear error`` for any other message (a traceback is a ``crash``).

Crash targets are pluggable (``CRASH_TARGETS``): each says how to set up inputs, the child command of one run,
its injection points (Python run in the child before the work: it patches a function to SIGKILL the process),
a checksum of the stored state and the visible-consistency check.  ``setup(work, fast)``: smaller inputs when
``fast``.  Registered here: ``ingest``, and the writers (issue 30) ``analyze`` (every trace), ``analyze --trace``
(one trace: computed in its own file, published under the lock) and ``forget``, killed at each fault point of
their publication (``taxbreak.store.faults.fault_point``) and at random; each of their runs starts from a copy of a
template home (``prepare``), and a finished re-run must leave no staging folder, pending marker, snapshot copy or
run file (``leftovers``).  (Until issue 30 the doc said an analysis target registered itself from elsewhere;
nothing did, and the bench killed only ingest.)
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reliability.corpus import GOOD_EVENTS, Case, cases, trace_bytes

COLUMNS = ("tried", "ok", "clear error", "unclear error", "crash", "hang", "silent wrong", "secrets kept", "data lost",
           "leftover", "escapes")
BAD = ("unclear error", "crash", "hang", "silent wrong", "secrets kept", "data lost", "leftover", "escapes")
CASE_TIMEOUT_S = 60


@dataclass
class Tally:
    section: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0))
    notes: list[str] = field(default_factory=list)

    def add(self, outcome: str, what: str, note: str = "") -> None:
        self.counts["tried"] += 1
        self.counts[outcome] += 1
        if outcome in BAD:
            self.notes.append(f"{self.section}: {what}: {outcome}: {note}")

    def extra(self, outcome: str, what: str, note: str) -> None:
        """One more finding about an input already counted (a leftover after an otherwise fine run)."""
        self.counts[outcome] += 1
        self.notes.append(f"{self.section}: {what}: {outcome}: {note}")

    @property
    def bad(self) -> int:
        return sum(self.counts[k] for k in BAD)


def _child_env(work: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAXBREAK_")}
    tmp = work / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env.update({"TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra or {})
    return env


def _leftovers(lake: Path, tmp: Path) -> list[str]:
    """Temporary things a finished run must not leave behind."""
    out = []
    staging = lake / "_staging"
    if staging.is_dir():
        out += [f"_staging/{p.name}" for p in staging.iterdir()]
    cat = lake / "catalogue"
    if cat.is_dir():
        out += [f"catalogue/{p.name}" for p in cat.iterdir() if p.name.startswith(".")]
    if tmp.is_dir():
        out += [f"tmp/{p.name}" for p in tmp.iterdir() if p.name.startswith("taxbreak-")]
    return out


# -- the corpus ---------------------------------------------------------------------------------------------
_CORPUS_CHILD = r"""
import json, os, signal, sys, time
from pathlib import Path
from taxbreak.config import ingest_limits
from taxbreak.ingest import Lake, ingest_file

class Hang(Exception):
    pass

def on_alarm(*_):
    raise Hang()

signal.signal(signal.SIGALRM, on_alarm)
todo = json.loads(sys.argv[1])
canary = Path(sys.argv[2])
for item in todo:
    print("@@" + json.dumps({"start": item["name"]}), flush=True)
    saved = {k: os.environ.get(k) for k in item["env"]}
    os.environ.update(item["env"])
    out = {"name": item["name"]}
    t0 = time.monotonic()
    signal.alarm(int(item["timeout"]))
    try:
        lake = Lake(item["lake"])
        # the item's limits come from its TAXBREAK_MAX_* environment, read now as the CLI reads it
        res = ingest_file(item["path"], lake, limits=ingest_limits())
        out.update(status=res.status, error=res.error, trace_id=res.trace_id)
    except Hang:
        out["hang"] = True
    except BaseException as exc:
        out["exception"] = f"{type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if "hang" not in out and "exception" not in out:
        try:
            c = ingest_file(canary, lake)
            out["canary"] = c.status
        except BaseException as exc:
            out["canary"] = f"{type(exc).__name__}: {exc}"
    out["seconds"] = round(time.monotonic() - t0, 3)
    print("@@" + json.dumps(out), flush=True)
"""


def _lake_problems(lake_dir: Path, case: Case, trace_id: str) -> list[str]:
    """What is wrong in a lake that stored ``case``: counts, impossible values, secrets."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from taxbreak.ingest import Lake

    lake = Lake(lake_dir)
    row = lake.catalogue_row(trace_id)
    problems = []
    if row is None or row["status"] != "ingested" or not lake.has_events(trace_id):
        return ["'ingested' without a stored row and events file"]
    skipped = json.loads(row["skipped_counts_json"] or "{}")
    if case.events is not None and row["event_count"] != case.events:
        problems.append(f"{row['event_count']} events stored, expected {case.events}")
    if skipped != case.skipped:
        problems.append(f"skipped {skipped}, expected {case.skipped}")
    if row["source_event_count"] != row["event_count"] + sum(skipped.values()):
        problems.append("event_count + skipped != source_event_count")
    table = pq.read_table(lake.events_path(trace_id))
    ts, dur, kind = table.column("ts_ns"), table.column("dur_ns"), table.column("kind")
    if (pc.min(dur).as_py() or 0) < 0:
        problems.append("a negative duration is stored")
    if pc.sum(pc.and_(pc.is_null(ts), pc.not_equal(kind, "metadata"))).as_py():
        problems.append("a timed event without ts_ns is stored")
    try:
        pc.add_checked(ts, pc.fill_null(dur, 0))
    except Exception:  # noqa: BLE001 - arrow's overflow error
        problems.append("ts_ns + dur_ns overflows int64")
    meta = json.loads(row["metadata_json"] or "{}")
    problems += [f"metadata {k} = {meta.get(k)!r}, expected {v!r}" for k, v in case.metadata.items()
                 if meta.get(k) != v]
    if case.metadata_phrase and case.metadata_phrase not in row["metadata_json"]:
        problems.append(f"metadata does not say {case.metadata_phrase!r}")
    text = json.dumps(row, default=str) + "\n".join(
        str(a) for col in ("args_json", "name", "raw_name") for a in table.column(col).to_pylist())
    problems += [f"secret {s[:4]}...{s[-3:]} stored" for s in case.secrets if s in text]
    return problems


def classify_case(case: Case, res: dict, path: Path, lake_dir: Path) -> tuple[str, str]:
    if res.get("hang"):
        return "hang", f"no answer within {CASE_TIMEOUT_S} s"
    if "exception" in res:
        return "crash", res["exception"]
    if res.get("canary") != "ingested":
        return "data lost", f"a good file ingested after it: {res.get('canary')}"
    status, error = res.get("status"), res.get("error") or ""
    if case.expect == "ingested":
        if status != "ingested":
            return "unclear error", f"expected it stored, got {status}: {error}"
        problems = _lake_problems(lake_dir, case, res["trace_id"])
        if any(p.startswith("secret ") for p in problems):
            return "secrets kept", "; ".join(problems)
        return ("silent wrong", "; ".join(problems)) if problems else ("ok", "")
    if status == "ingested":
        return "silent wrong", f"stored, expected {case.expect}"
    if "unexpected " in error or "Traceback" in error:
        return "crash", error
    if str(path) not in error or (case.phrase and case.phrase not in error) or "taxbreak-ingest-" in error:
        return "unclear error", error
    from taxbreak.ingest import Lake

    row = Lake(lake_dir).catalogue_row(res["trace_id"]) if res.get("trace_id") else None
    if case.expect == "refused":
        return ("clear error", "") if row is None else ("unclear error", f"recorded as {row['status']}")
    if status != case.expect or row is None or row["status"] != case.expect:
        return "unclear error", f"status {status} / row {row and row['status']}, expected {case.expect}: {error}"
    return "clear error", ""


def run_corpus(work: Path, *, fast: bool = False, log: Callable[[str], None] = lambda s: None) -> Tally:
    """Every corpus case (``fast``: the subset) ingested by one child process (restarted after a crash)."""
    tally = Tally("hostile inputs")
    chosen = [c for c in cases() if c.fast or not fast]
    canary = work / "canary" / "canary.json"
    canary.parent.mkdir(parents=True, exist_ok=True)
    canary.write_bytes(trace_bytes(GOOD_EVENTS, traceName="canary"))
    items, by_name = [], {}
    for case in chosen:
        folder = work / "cases" / case.name
        folder.mkdir(parents=True, exist_ok=True)
        path = case.make(folder)
        lake = work / "lakes" / case.name
        by_name[case.name] = (case, path, lake)
        items.append({"name": case.name, "path": str(path), "lake": str(lake), "env": case.env,
                      "timeout": CASE_TIMEOUT_S})
    env = _child_env(work)
    while items:
        proc = subprocess.run([sys.executable, "-c", _CORPUS_CHILD, json.dumps(items), str(canary)], env=env,
                              capture_output=True, text=True, timeout=CASE_TIMEOUT_S * (len(items) + 2))
        done, current = set(), None
        for line in proc.stdout.splitlines():
            if not line.startswith("@@"):
                continue
            msg = json.loads(line[2:])
            if "start" in msg:
                current = msg["start"]
                continue
            case, path, lake = by_name[msg["name"]]
            outcome, note = classify_case(case, msg, path, lake)
            tally.add(outcome, case.name, note)
            log(f"  {case.name:24s} {outcome:14s} {note[:150]}")
            left = _leftovers(lake, work / "tmp")
            if left:
                tally.extra("leftover", case.name, ", ".join(left[:3]))
                for name in left:  # counted once, then cleared so the next case starts clean
                    target = (work / name) if name.startswith("tmp/") else (lake / name)
                    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
            done.add(msg["name"])
        if current is not None and current not in done:  # the child died in this case
            tally.add("crash", current, f"the process died (exit {proc.returncode}): {proc.stderr[-300:]}")
            log(f"  {current:24s} crash")
            done.add(current)
        items = [i for i in items if i["name"] not in done]
        if proc.returncode != 0 and not done:
            raise RuntimeError(f"the corpus child failed before any case: {proc.stderr[-2000:]}")
    return tally


# -- kills: random and injected ------------------------------------------------------------------------------
@dataclass
class CrashTarget:
    """One kind of writer the crash test kills.  ``setup(work)`` writes the inputs; ``command(work, store)`` is
    the child's argv (it runs ``store`` to completion); ``injections`` maps a point name to Python code run in the
    child first (patching a function to SIGKILL the process there); ``checksum(store)`` digests the stored state
    a reader sees; ``visible_problems(store)`` lists inconsistencies a reader could see right after a kill."""

    name: str
    setup: Callable[[Path, bool], None]
    command: Callable[[Path, Path], list[str]]
    injections: dict[str, str]
    checksum: Callable[[Path], str]
    visible_problems: Callable[[Path], list[str]]
    prepare: Callable[[Path, Path], None] | None = None  # (work, store): the store as it is before each run
    leftovers: Callable[[Path, Path], list[str]] | None = None  # (work, store): what a finished re-run left


CRASH_TARGETS: dict[str, CrashTarget] = {}


def register_crash_target(target: CrashTarget) -> None:
    """Add a writer to the crash test (the analysis publication registers itself here)."""
    CRASH_TARGETS[target.name] = target


def _kineto_events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    events = [{"ph": "M", "name": "process_name", "pid": 11, "tid": 0, "args": {"name": "python"}}]
    t = 1000
    for i in range(n):
        d = rng.randint(5, 50)
        events += [
            {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 11, "tid": 22, "ts": t, "dur": d + 20,
             "args": {"External id": i + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 22, "ts": t + 2,
             "dur": 5, "args": {"correlation": 10_000 + i, "External id": i + 1}},
            {"ph": "X", "cat": "kernel", "name": f"kernel_{i % 11}", "pid": 0, "tid": 7, "ts": t + 9, "dur": d,
             "args": {"device": 0, "stream": 7, "correlation": 10_000 + i, "External id": i + 1}},
        ]
        t += d + 30
    return events


def _ingest_setup(work: Path, fast: bool = False) -> None:
    inputs = work / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    sizes = (2_000, 500, 3_000) if fast else (20_000, 5_000, 30_000)  # 3 traces: 3n + 1 events each
    for i, n in enumerate(sizes):
        (inputs / f"t{i}.json").write_bytes(trace_bytes(_kineto_events(n, i)))
    (inputs / "broken.json").write_bytes(trace_bytes(GOOD_EVENTS)[:-20])
    (inputs / "notes.json").write_bytes(b'{"not": "a trace"}')


_INGEST_CHILD = r"""
import os, sys
from pathlib import Path
from taxbreak.ingest import Lake, ingest_file, iter_trace_files
lake = Lake(sys.argv[2])
for f in iter_trace_files([sys.argv[1]]):
    ingest_file(f, lake)
"""

# each: patch one step of the publication to kill the process when it is reached
_KILL = "import os, signal\ndef _die(*a, **k):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
INGEST_INJECTIONS = {
    "while parsing": _KILL + "import taxbreak.ingest.kineto as m\nm._stage = _die\n",
    "while writing events": _KILL + "import pyarrow.parquet as pq\npq.ParquetWriter.write_batch = _die\n",
    "before the events rename": _KILL + (
        "import taxbreak.ingest.lake as m\n_orig = m.os.replace\n"
        "def _r(src, dst):\n    if str(dst).endswith('part-0.parquet'):\n        _die()\n    return _orig(src, dst)\n"
        "m.os.replace = _r\n"),
    "between events and catalogue": _KILL + (
        "import taxbreak.ingest.lake as m\n_orig = m.Lake.write_catalogue_row\n"
        "def _w(self, row):\n    if row['status'] == 'ingested':\n        _die()\n    return _orig(self, row)\n"
        "m.Lake.write_catalogue_row = _w\n"),
    "after the catalogue tmp file": _KILL + (  # written whole (the object store's put_bytes), not yet renamed
        "_orig = os.replace\n"
        "def _r(src, dst):\n    if os.path.basename(str(src)).startswith('.tmp-') and 'catalogue' in str(dst):\n"
        "        _die()\n    return _orig(src, dst)\nos.replace = _r\n"),
    "while recording a failure": _KILL + "import taxbreak.ingest.lake as m\nm.Lake.record_failure = _die\n",
}


def _ingest_command(work: Path, store: Path) -> list[str]:
    return [sys.executable, "-c", _INGEST_CHILD, str(work / "inputs"), str(store)]


def lake_checksum(store: Path) -> str:
    """A digest of what a reader of the lake sees: every catalogue row (less its time of writing) and, for
    stored traces, the events' content."""
    import pyarrow.parquet as pq

    from taxbreak.ingest import Lake

    lake = Lake(store)
    digest = hashlib.sha256()
    for row in sorted(lake.catalogue().to_pylist(), key=lambda r: r["trace_id"]):
        row = {k: v for k, v in row.items() if k not in ("ingested_at_ns",)}
        digest.update(json.dumps(row, sort_keys=True, default=str).encode())
        if row["status"] == "ingested" and lake.has_events(row["trace_id"]):
            table = pq.read_table(lake.events_path(row["trace_id"]))
            for col in table.columns:
                digest.update(json.dumps(col.to_pylist(), default=str).encode())
    return digest.hexdigest()


def lake_visible_problems(store: Path) -> list[str]:
    """What a reader could see wrong right after a kill: an 'ingested' row without a readable, complete events
    file (events without a row are invisible: readers take traces from the catalogue)."""
    import pyarrow.parquet as pq

    from taxbreak.ingest import Lake

    lake = Lake(store)
    out = []
    for row in lake.catalogue().to_pylist():
        if row["status"] != "ingested":
            continue
        if not lake.has_events(row["trace_id"]):
            out.append(f"{row['file_name']}: 'ingested' without events")
            continue
        try:
            n = pq.read_metadata(lake.events_path(row["trace_id"])).num_rows
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the finding
            out.append(f"{row['file_name']}: events unreadable ({exc})")
            continue
        if n != row["event_count"]:
            out.append(f"{row['file_name']}: {n} events in the file, {row['event_count']} in the row")
    return out


register_crash_target(CrashTarget("ingest", _ingest_setup, _ingest_command, INGEST_INJECTIONS, lake_checksum,
                                  lake_visible_problems, leftovers=lambda base, store: _leftovers(store, base / "tmp")))


# -- the writers: analyze (all traces, one trace) and forget (issue 30) ----------------------------------------
# A home (lake, warehouse, marts, snapshot) copied per run from a template the target's setup builds; the child is
# the command line itself, each injection the fault point where it SIGKILLs itself
# (taxbreak.store.faults.fault_point: the warehouse transaction open, before and after its commit, the marts
# staged / renamed / committed, the snapshot copied / published, a run for one trace computed in its own file).
_WRITER_CHILD = r"""
import json, os, sys
from pathlib import Path
home = Path(sys.argv[1])
os.environ["TAXBREAK_HOME"] = str(home)
argv = json.loads(sys.argv[2])
from taxbreak.cli.main import main
if argv[0] == "forget":  # t1.json by its id (the setup wrote it): a re-run finds it wherever a killed run left it
    import contextlib, io
    tid = json.loads((home.parent / "forget_id").read_text())
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["forget", tid])
    sys.stderr.write(err.getvalue())
    # forgotten whole by an earlier run (a random kill that came too late): nothing holds it, nothing to do
    sys.exit(0 if rc == 2 and "no trace matches" in err.getvalue() else rc)
sys.exit(main(argv))
"""


def _fault(point: str) -> str:
    return f"import os\nos.environ['TAXBREAK_FAULT_POINT'] = {point!r}\n"


def _writer_points(kind: str) -> dict[str, str]:
    from taxbreak.engine.plan import plan_tables, sql_files

    kept = [n for n in plan_tables() if n in {f.name for f in sql_files() if f.materialize != "temp"}]
    points = [f"publish:{kept[0]}", f"publish:{kept[len(kept) // 2]}", f"publish:{kept[-1]}", "before_commit",
              "after_commit", "marts_staged", "marts_renamed", "marts_committed", "snapshot_copied",
              "snapshot_published"]
    if kind == "one trace":  # computed in its own file first, then copied into the warehouse under the lock
        points = ["run_computed", *points[1:2], *points[3:]]
    elif kind == "forget":  # one transaction of deletes: no table-by-table points
        points = points[3:]
    return {p: _fault(p) for p in points}


def _writer_setup(work: Path, fast: bool, *, forget: bool) -> None:
    """The template home: three Kineto traces in the lake; analysed all three (forget) or the first two (analyze:
    the third is new to the run)."""
    home = work / "template"
    (home / "in").mkdir(parents=True, exist_ok=True)
    sizes = (300, 100, 400) if fast else (3_000, 1_000, 4_000)
    for i, n in enumerate(sizes):
        (home / "in" / f"t{i}.json").write_bytes(trace_bytes(_kineto_events(n, 20 + i)))
    steps = [["ingest", "-q", "in/t0.json", "in/t1.json"], ["analyze", "-q"], ["ingest", "-q", "in/t2.json"]]
    if forget:
        steps.append(["analyze", "-q"])
    for argv in steps:
        proc = _run_cli(home, argv, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"the crash template did not build ({argv}): {proc.stderr[-2000:]}")
    if forget:
        from taxbreak.ingest import file_sha256

        (work / "forget_id").write_text(json.dumps(file_sha256(home / "in" / "t1.json")))


def _writer_prepare(work: Path, store: Path) -> None:
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(work / "template", store, ignore=shutil.ignore_patterns(".readers", "*.lock"))


def _writer_command(argv: list[str]) -> Callable[[Path, Path], list[str]]:
    def command(work: Path, store: Path) -> list[str]:
        return [sys.executable, "-c", _WRITER_CHILD, str(store), json.dumps(argv)]

    return command


def _tables_digest(con: object, names: list[str] | None = None) -> dict[str, str]:
    if names is None:
        names = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
    return {t: str(con.execute(f'SELECT count(*), sum(hash(x)) FROM "{t}" x').fetchone()) for t in names}


def writer_state(home: Path) -> dict[str, dict[str, str]]:
    """What a reader of ``home`` sees: every table of the warehouse file (count and a hash of every row) and the
    same tables as a reader opens them (taxbreak.store.query.open_readonly: the snapshot when it is current,
    else the file)."""
    import duckdb

    from taxbreak.store.query import open_readonly

    db = home / "taxbreak.duckdb"
    con = duckdb.connect(str(db), read_only=True)
    try:
        file_state = _tables_digest(con)
    finally:
        con.close()
    opened = open_readonly(db)
    try:
        have = {r[0] for r in opened.con.execute("SELECT table_name FROM duckdb_tables() UNION ALL "
                                                 "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        reader = _tables_digest(opened.con, [t for t in file_state if t in have])
    finally:
        opened.close()
    return {"warehouse": file_state, "readers": reader}


def writer_checksum(store: Path) -> str:
    return json.dumps({**writer_state(store), "lake": lake_checksum(store / "lake")}, sort_keys=True)


_STATES: dict[Path, dict[str, dict[str, str]]] = {}


def writer_visible_problems(store: Path) -> list[str]:
    """Right after a kill: the warehouse file in the state before the run or after it, never a mix, and a reader
    reads one of those two whole."""
    before = _STATES.setdefault(store.parent / "template", writer_state(store.parent / "template"))
    after = _STATES.setdefault(store.parent / "clean", writer_state(store.parent / "clean"))
    now = writer_state(store)
    out = []
    for part in ("warehouse", "readers"):
        if now[part] not in (before[part], after[part]):
            mixed = sorted(t for t in now[part] if now[part][t] != before[part].get(t)
                           and now[part][t] != after[part].get(t))
            out.append(f"{part}: neither before nor after the run ({', '.join(mixed[:3]) or 'tables differ'})")
    return out


def writer_leftovers(work: Path, store: Path) -> list[str]:
    """A writer's temporary things a finished re-run must not leave: marts staging folders, pending markers and
    manifest temporaries, snapshot copies, runs' own files, spill folders, the lake's staging."""
    out = []
    for pattern in ("marts/.staging-*", "marts/.pending-*", "marts/._manifest.json.*.tmp", "exports/.snapshot*.tmp*",
                    "taxbreak.duckdb.runs/**/run_*", "taxbreak.duckdb.tmp", "lake/_staging/*"):
        out += [str(p.relative_to(store)) for p in store.glob(pattern)]
    return out + _leftovers(store / "no-lake", work / "tmp")


for _name, _argv, _kind in (("analyze", ["analyze", "-q"], "all"),
                            ("analyze --trace", ["analyze", "-q", "--trace", "t2.json"], "one trace"),
                            ("forget", ["forget", "t1.json"], "forget")):
    register_crash_target(CrashTarget(
        _name, (lambda f: lambda work, fast=False: _writer_setup(work, fast, forget=f))(_kind == "forget"),
        _writer_command(_argv), _writer_points(_kind), writer_checksum, writer_visible_problems,
        prepare=_writer_prepare, leftovers=writer_leftovers))


def run_crashes(work: Path, *, random_kills: int = 10, targets: list[str] | None = None, seed: int = 13,
                fast: bool = False, log: Callable[[str], None] = lambda s: None) -> Tally:
    """For each target: a clean run (its checksum), then kills at each injection point and ``random_kills``
    kills at random times; after each kill the visible state is checked, the work re-run to completion, and the
    checksum compared with the clean run's."""
    tally = Tally("kills")
    rng = random.Random(seed)
    for tname in targets or list(CRASH_TARGETS):
        t = CRASH_TARGETS[tname]
        base = work / ("crash-" + tname.replace(" --", "-"))
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        t.setup(base, fast)
        env = _child_env(base)
        clean = base / "clean"
        if t.prepare is not None:
            t.prepare(base, clean)
        t0 = time.monotonic()
        subprocess.run(t.command(base, clean), env=env, check=True, capture_output=True, timeout=600)
        clean_s = time.monotonic() - t0
        want = t.checksum(clean)
        plans = [(f"at {p}", p, None) for p in t.injections]
        plans += [(f"random kill {i + 1}", None, rng.uniform(0.2, 0.9 * clean_s)) for i in range(random_kills)]
        for i, (label, point, delay) in enumerate(plans):
            store = base / f"run{i}"
            if t.prepare is not None:
                t.prepare(base, store)
            cmd = t.command(base, store)
            if point is not None:
                cmd = [cmd[0], "-c", t.injections[point] + cmd[2], *cmd[3:]]
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                if delay is not None:
                    try:
                        proc.wait(timeout=delay)
                    except subprocess.TimeoutExpired:
                        proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                tally.add("hang", f"{tname} {label}", "the run did not end")
                continue
            killed = proc.returncode == -signal.SIGKILL
            if point is not None and not killed:
                tally.add("crash", f"{tname} {label}", f"exit {proc.returncode}: {proc.stderr.read()[-300:]!r}")
                continue
            visible = t.visible_problems(store) if store.exists() else []
            rerun = subprocess.run(t.command(base, store), env=env, capture_output=True, text=True, timeout=600)
            if rerun.returncode != 0:
                tally.add("crash", f"{tname} {label}", f"the re-run failed: {rerun.stderr[-300:]}")
                continue
            got = t.checksum(store)
            left = t.leftovers(base, store) if t.leftovers is not None else []
            if visible:
                tally.add("silent wrong", f"{tname} {label}", "; ".join(visible))
            elif got != want:
                tally.add("data lost", f"{tname} {label}", "after the re-run the state differs from a clean run")
            else:
                tally.add("ok", f"{tname} {label}")
            if left:
                tally.extra("leftover", f"{tname} {label}", ", ".join(left[:3]))
            log(f"  {tname} {label:34s} {'killed' if killed else 'finished':8s} "
                f"{'; '.join(visible) or ('checksum ok' if got == want else 'CHECKSUM DIFFERS')}"
                + (f"; leftovers {left}" if left else ""))
    return tally


# -- analyze racing forget (issue 30 item 2) ------------------------------------------------------------------
def holders(home: Path, trace_id: str) -> list[str]:
    """Every place a reader or writer could still find ``trace_id``: warehouse tables, the readers' snapshot (each
    file in a DuckDB instance of its own), the marts' manifest, the lake's catalogue."""
    import duckdb

    from taxbreak.ingest import Lake
    from taxbreak.store.marts import LocalMarts, load_manifest

    out = []
    for db in (home / "taxbreak.duckdb", home / "exports" / "snapshot.duckdb"):
        con = duckdb.connect(":memory:")
        try:
            con.execute(f"ATTACH '{db}' AS w (READ_ONLY)")
            names = [r[0] for r in con.execute(
                "SELECT DISTINCT table_name FROM duckdb_columns() WHERE column_name = 'trace_id' "
                "AND database_name = 'w' AND NOT internal").fetchall()]
            for t in names:
                (n,) = con.execute(f'SELECT count(*) FROM w."{t}" WHERE trace_id = $t', {"t": trace_id}).fetchone()
                if n:
                    out.append(f"{db.name}:{t}:{n}")
        finally:
            con.close()
    manifest = load_manifest(LocalMarts(home / "marts"))
    if manifest is not None and trace_id in manifest.traces:
        out.append("marts manifest")
    if Lake(home / "lake").catalogue_row(trace_id) is not None:
        out.append("catalogue")
    return out


def run_forget_races(work: Path, *, races: int = 6, log: Callable[[str], None] = lambda s: None) -> Tally:
    """``analyze --trace T`` and ``forget T`` started together (the forget first in every other race) on a home
    where T is ingested and analysed: whenever forget returns 0, nothing holds T (before issue 30, 3 of 13 such
    races left thousands of its rows in the tables); analyze ends with 0, or 2 naming a trace gone."""
    from taxbreak.ingest import file_sha256

    tally = Tally("analyze racing forget")
    home = work / "forget-races"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(_analysed_home(work / "faults"), home, ignore=shutil.ignore_patterns(".readers", "*.lock"))
    _new_trace(home)
    tid = file_sha256(home / "in" / "t.json")
    env = _child_env(home, {"TAXBREAK_HOME": str(home)})
    for i in range(races):
        what = f"race {i + 1} ({'forget' if i % 2 else 'analyze'} started first)"
        for argv in (["ingest", "-q", "in"], ["analyze", "-q", "--trace", "t.json"]):
            if (setup := _run_cli(home, argv)).returncode != 0:
                tally.add("crash", what, f"{argv[0]} before the race: {setup.stderr[-300:]}")
                break
        else:
            cmds = {"analyze": ["analyze", "-q", "--trace", tid[:16]], "forget": ["forget", tid[:16]]}
            order = ["forget", "analyze"] if i % 2 else ["analyze", "forget"]
            procs = {n: subprocess.Popen([sys.executable, "-c", _CLI_CHILD, "", json.dumps(cmds[n])], env=env,
                                         cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                     for n in order}
            try:
                errs = {n: p.communicate(timeout=300)[1] for n, p in procs.items()}
            except subprocess.TimeoutExpired:
                for p in procs.values():
                    p.kill()
                tally.add("hang", what, "a racer did not end")
                continue
            rcs = {n: p.returncode for n, p in procs.items()}
            held = holders(home, tid)
            if any("Traceback" in e for e in errs.values()) or rcs["forget"] != 0 or rcs["analyze"] not in (0, 2):
                outcome, note = "crash", f"exits {rcs}: {' | '.join(e.strip()[-200:] for e in errs.values())}"
            elif held:
                outcome, note = "silent wrong", f"forget returned 0 and {', '.join(held[:3])} still hold the trace"
            else:
                outcome, note = "ok", ""
            tally.add(outcome, what, note)
            log(f"  {what:40s} {outcome:14s} exits {rcs} {note[:100]}")
    return tally


# -- concurrent writers ------------------------------------------------------------------------------------
def run_concurrency(work: Path, *, processes: int = 4, rounds: int = 2, fast: bool = False,
                    log: Callable[[str], None] = lambda s: None) -> Tally:
    """``processes`` children ingest the same folder into one lake at once, ``rounds`` times: every good trace
    stored once, no failure row for content another process stored, the same checksum as a clean run."""
    tally = Tally("concurrent ingests")
    base = work / "concurrency"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    _ingest_setup(base, fast)
    env = _child_env(base)
    clean = base / "clean"
    subprocess.run(_ingest_command(base, clean), env=env, check=True, capture_output=True, timeout=600)
    want = lake_checksum(clean)
    for r in range(rounds):
        store = base / f"round{r}"
        procs = [subprocess.Popen(_ingest_command(base, store), env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for _ in range(processes)]
        codes = [p.wait(timeout=600) for p in procs]
        errors = [p.stderr.read() for p in procs]
        label = f"{processes} processes, round {r + 1}"
        if any(codes):
            tally.add("crash", label, f"exit codes {codes}: {[e[-200:] for e in errors if e]}")
            continue
        got = lake_checksum(store)
        from taxbreak.ingest import Lake

        statuses = {row["file_name"]: row["status"] for row in Lake(store).catalogue().to_pylist()}
        if any(statuses.get(f"t{i}.json") != "ingested" for i in range(3)):
            tally.add("data lost", label, f"catalogue {statuses}")
        elif got != want:
            tally.add("silent wrong", label, "the lake differs from a clean run's")
        else:
            tally.add("ok", label)
        left = _leftovers(store, base / "tmp")
        if left:
            tally.extra("leftover", label, ", ".join(left[:3]))
        log(f"  {label}: {statuses}")
    return tally


_REPLACE_CHILD = r"""
import os, sys
from pathlib import Path
import taxbreak.ingest.kineto as m
from taxbreak.ingest import Lake, ingest_file
path, new, lake = Path(sys.argv[1]), Path(sys.argv[2]), Lake(sys.argv[3])
orig, calls = m._stage, []
def _stage(*a, **k):
    if not calls:  # the first parse: the file is replaced under it
        calls.append(1)
        os.replace(new, path)
    return orig(*a, **k)
m._stage = _stage
res = ingest_file(path, lake)
print("@@", res.status, res.trace_id, (res.row or {}).get("event_count"))
"""


def run_replaced_file(work: Path, log: Callable[[str], None] = lambda s: None) -> Tally:
    """A file replaced while it is parsed: stored under the hash of the bytes parsed, never the old hash."""
    tally = Tally("file replaced during ingest")
    base = work / "replace"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    old, new = trace_bytes(_kineto_events(50, 1)), trace_bytes(_kineto_events(80, 2))
    (base / "t.json").write_bytes(old)
    (base / "new.json").write_bytes(new)
    store = base / "lake"
    proc = subprocess.run([sys.executable, "-c", _REPLACE_CHILD, str(base / "t.json"), str(base / "new.json"),
                           str(store)], env=_child_env(base), capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        tally.add("crash", "replaced file", proc.stderr[-300:])
        return tally
    status, trace_id, events = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")][-1].split()[1:]
    from taxbreak.ingest import Lake

    rows = {r["trace_id"]: r for r in Lake(store).catalogue().to_pylist()}
    new_id, old_id = hashlib.sha256(new).hexdigest(), hashlib.sha256(old).hexdigest()
    if old_id in rows:
        tally.add("silent wrong", "replaced file", "a row under the old content's hash")
    elif (status, trace_id, events) != ("ingested", new_id, str(1 + 3 * 80)):
        tally.add("silent wrong", "replaced file", f"{status} {trace_id[:12]} {events}")
    else:
        tally.add("ok", "replaced file")
    log(f"  replaced during ingest: {status} under the new content's hash: {trace_id == new_id}")
    return tally


# -- S3 (moto) ------------------------------------------------------------------------------------------------
S3_KEYS = ("inbox/" + "n" * 290 + ".json", "inbox//etc/x.json", "inbox/../up.json", "inbox/./dot.json",
           "inbox/a b/ünï code.json", "inbox/deep/" + "/".join("d" * 20 for _ in range(10)) + "/t.json.gz")


def run_s3(work: Path, log: Callable[[str], None] = lambda s: None) -> Tally:
    """Odd object keys in an S3 bucket (moto's server): each listed, ingested, and catalogued under its URL."""
    import gzip

    import boto3
    from moto.server import ThreadedMotoServer

    from taxbreak.ingest import Lake
    from taxbreak.ingest.objects import S3Settings
    from taxbreak.store.bucket import S3Bucket, ingest_from

    tally = Tally("S3 keys")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        settings = S3Settings(endpoint_url=endpoint, access_key_id="testing", secret_access_key="testing",
                              region="us-east-1")
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        client.create_bucket(Bucket="reports")
        bodies = {}
        for key in S3_KEYS:
            body = trace_bytes(GOOD_EVENTS, traceName=key)
            bodies[key] = gzip.compress(body) if key.endswith(".gz") else body
            client.put_object(Bucket="reports", Key=key, Body=bodies[key])
        bucket = S3Bucket("s3://reports/inbox", settings)
        listed = {e.name for e in bucket.list()}
        lake = Lake(work / "s3-lake")
        for key in S3_KEYS:
            name = key[len("inbox/"):]
            url = f"s3://reports/{key}"
            if name not in listed:
                tally.add("silent wrong", url[:60], "not listed: never ingested nor reported")
                continue
            try:
                res = ingest_from(bucket, name, lake, force=False, cache_dir=None)
            except Exception as exc:  # noqa: BLE001 - the finding
                tally.add("crash", url[:60], f"{type(exc).__name__}: {exc}")
                continue
            row = lake.catalogue_row(res.trace_id) if res.trace_id else None
            if res.status == "ingested" and row and row["source_path"] == url and row["event_count"] == 4:
                tally.add("ok", url[:60])
            elif res.status == "failed" and row is not None and url in (res.error or ""):
                tally.add("clear error", url[:60])
            else:
                tally.add("silent wrong", url[:60], f"{res.status}: {res.error}; row {row and row['source_path']}")
            log(f"  {url[:70]:72s} {res.status}")
    finally:
        server.stop()
    return tally


# -- analyses that must flag what they cannot compute (issue 30) ------------------------------------------------
def _flag_traces() -> dict[str, bytes]:
    """Kineto traces (times in us) an analysis must flag: two launches under one correlation id, each with its kernel
    20 us later; a 1,000 s kernel launched in a 2 ms step."""
    def x(cat: str, name: str, ts: float, dur: float, **args: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 11, "tid": 22, "ts": ts, "dur": dur, "args": args}

    def k(name: str, ts: float, dur: float, corr: int) -> dict:
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                "args": {"device": 0, "stream": 7, "correlation": corr, "External id": 1}}

    shared = [x("user_annotation", "ProfilerStep#1", 0, 100), x("cpu_op", "aten::mm", 1, 50, **{"External id": 1}),
              x("cuda_runtime", "cudaLaunchKernel", 2, 1, correlation=7, **{"External id": 1}), k("a", 22, 5, 7),
              x("cuda_runtime", "cudaLaunchKernel", 10, 1, correlation=7, **{"External id": 1}), k("b", 30, 5, 7)]
    long = [x("user_annotation", "ProfilerStep#1", 0, 2000), x("cpu_op", "aten::mm", 1, 1990, **{"External id": 1}),
            x("cuda_runtime", "cudaLaunchKernel", 2, 1, correlation=1, **{"External id": 1}),
            k("corrupt", 5, 1e9, 1)]
    return {"shared_correlation.json": trace_bytes(shared), "kernel_1000s_in_2ms_step.json": trace_bytes(long)}


_FLAG_CHECKS = {  # trace file -> (column of its trace-scope taxbreak_by_scope row, its value in a correct run)
    "shared_correlation.json": ("shared_correlation_kernels", 2),
    "kernel_1000s_in_2ms_step.json": ("impossible_duration_kernels", 1),
}


def run_analysis_flags(work: Path, log: Callable[[str], None] = lambda s: None) -> Tally:
    """Each trace of ``_flag_traces`` ingested and analysed: ok when its trace row counts the condition, silent
    wrong when it does not (the link made anyway, an HDBI of 1.000 without a flag)."""
    import duckdb

    from taxbreak.engine import analysis
    from taxbreak.ingest import Lake, ingest_file

    tally = Tally("analysis flags")
    base = work / "flags"
    shutil.rmtree(base, ignore_errors=True)
    (base / "in").mkdir(parents=True)
    lake = Lake(base / "lake")
    ids = {}
    for name, data in _flag_traces().items():
        (base / "in" / name).write_bytes(data)
        ids[name] = ingest_file(base / "in" / name, lake).trace_id
    try:
        analysis.materialize(base / "wh.duckdb", base / "lake")
    except Exception as exc:  # noqa: BLE001 - the finding
        for name in ids:
            tally.add("crash", name, f"{type(exc).__name__}: {exc}")
        return tally
    con = duckdb.connect(str(base / "wh.duckdb"), read_only=True)
    try:
        for name, (column, want) in _FLAG_CHECKS.items():
            row = con.execute(f"SELECT {column} FROM taxbreak_by_scope WHERE trace_id = ? AND scope_kind = 'trace'",
                              [ids[name]]).fetchone()
            got = row[0] if row else None
            tally.add("ok" if got == want else "silent wrong", name, f"{column} = {got}, expected {want}")
            log(f"  {name:34s} {column} = {got}")
    finally:
        con.close()
    return tally


# -- ordinary faults and readers (issue 30 items 4 and 6) ----------------------------------------------------------
_CLI_CHILD = r"""
import json, sys
exec(sys.argv[1])  # the fault: a patch of the one write the command makes ('' for none)
from taxbreak.cli.main import main
sys.exit(main(json.loads(sys.argv[2])))
"""

_FULL = "raise OSError(28, 'No space left on device'{where})"
# patches (Python run in the child first): the write points a test without root cannot make a disk fail at
_LAKE_FULL = ("import pyarrow.parquet as pq\ndef _f(*a, **k):\n    " + _FULL.format(where="") + "\n"
              "pq.ParquetWriter.write_batch = _f\n")
_LAKE_READ_ONLY = ("import pyarrow.parquet as pq\ndef _f(*a, **k):\n    raise OSError(30, 'Read-only file system')\n"
                   "pq.ParquetWriter.write_batch = _f\n")
_LAKE_VANISHES = ("import os, shutil, taxbreak.engine.analysis as a\n_o = a.prepare\ndef _p(*x, **k):\n"
                  "    shutil.rmtree(os.path.join(os.environ['TAXBREAK_HOME'], 'lake'))\n    return _o(*x, **k)\n"
                  "a.prepare = _p\n")
_REPORT_READ_ONLY = ("import pathlib\ndef _w(self, *a, **k):\n"
                     "    raise OSError(30, 'Read-only file system', str(self))\npathlib.Path.write_text = _w\n")
_EXPORT_FULL = ("import builtins, taxbreak.read.export as e\n_o = builtins.open\n"
                "def _op(p, mode='r', *a, **k):\n    if 'w' in mode:\n        " + _FULL.format(where=", str(p)") +
                "\n    return _o(p, mode, *a, **k)\ne.open = _op\n")


def _run_cli(home: Path, argv: list[str], patch: str = "", env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess:
    full = _child_env(home, {"TAXBREAK_HOME": str(home), **(env or {})})
    return subprocess.run([sys.executable, "-c", _CLI_CHILD, patch, json.dumps(argv)], env=full, cwd=home,
                          capture_output=True, text=True, timeout=timeout)


def home_digest(home: Path) -> dict[str, str]:
    """What a reader of ``home`` sees: every warehouse table's rows (count and a hash of every row), the lake
    (``lake_checksum``), and every file of the marts and exports by content (the writers' pending markers and
    the readers' pins left out)."""
    import duckdb

    out: dict[str, str] = {}
    db = home / "taxbreak.duckdb"
    if db.exists():
        con = duckdb.connect(str(db), read_only=True)
        try:
            for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall():
                out[f"table {t}"] = str(con.execute(f'SELECT count(*), sum(hash(x)) FROM "{t}" x').fetchone())
        finally:
            con.close()
    if (home / "lake").exists():
        out["lake"] = lake_checksum(home / "lake")
    for folder in ("marts", "exports"):
        for p in sorted((home / folder).rglob("*")):
            if p.is_file() and ".pending-" not in p.name and p.parent.name != ".readers":
                out[str(p.relative_to(home))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _analysed_home(base: Path) -> Path:
    """A home (lake, analysed warehouse, marts, snapshot) of the mixed scenario trace (tests/sql/scenarios.py)."""
    from sql.scenarios import build_mixed

    home = base / "template"
    if not (home / "taxbreak.duckdb").exists():
        shutil.rmtree(home, ignore_errors=True)
        build_mixed(home / "lake")
        proc = _run_cli(home, ["analyze", "-q"])
        if proc.returncode != 0:
            raise RuntimeError(f"the faults' template home did not build: {proc.stderr[-2000:]}")
    return home


@dataclass
class FaultCase:
    """One ordinary fault: the command, how the fault is made (``env``: an injected fault point; ``patch``), the
    path and the cause its line must name, and what to do before the command is run again without it."""

    name: str
    argv: list[str]
    path: str  # relative to the home; the line must name it (a prefix: a report page under reports/)
    cause: str
    env: dict[str, str] = field(default_factory=dict)
    patch: str = ""
    restore: Callable[[Path, Path], None] | None = None  # (home, template) before the re-run
    setup: Callable[[Path], None] | None = None


def _restore_lake(home: Path, template: Path) -> None:
    if not (home / "lake").exists():
        shutil.copytree(template / "lake", home / "lake")


def _new_trace(home: Path) -> None:
    (home / "in").mkdir(exist_ok=True)
    (home / "in" / "t.json").write_bytes(trace_bytes(_kineto_events(20, 5)))


def fault_cases() -> list[FaultCase]:
    from sql.scenarios import MIXED_ID

    space, ro = "no space left on the device", "the file system is read-only"
    return [
        FaultCase("analyze: warehouse disk full at COMMIT", ["analyze", "-q"], "taxbreak.duckdb", space,
                  env={"TAXBREAK_FAULT_POINT": "before_commit=no_space"}),
        FaultCase("analyze: marts disk full", ["analyze", "-q"], "marts", space,
                  env={"TAXBREAK_FAULT_POINT": "marts_staged=no_space"}),
        FaultCase("analyze: read-only warehouse", ["analyze", "-q"], "taxbreak.duckdb", ro,
                  env={"TAXBREAK_FAULT_POINT": "before_commit=read_only"}),
        FaultCase("analyze: marts folder refused", ["analyze", "-q"], "marts", "permission denied",
                  env={"TAXBREAK_FAULT_POINT": "marts_staged=permission"}),
        FaultCase("analyze: lake removed during it", ["analyze", "-q"], "lake",
                  "it was removed or moved while the command ran", patch=_LAKE_VANISHES, restore=_restore_lake),
        FaultCase("ingest: lake disk full", ["ingest", "-q", "in"], "lake", space, patch=_LAKE_FULL,
                  setup=_new_trace),
        FaultCase("ingest: read-only lake", ["ingest", "-q", "in"], "lake", ro, patch=_LAKE_READ_ONLY,
                  setup=_new_trace),
        FaultCase("forget: warehouse disk full", ["forget", MIXED_ID[:12]], "taxbreak.duckdb", space,
                  env={"TAXBREAK_FAULT_POINT": "before_commit=no_space"}),
        FaultCase("whatif --save: warehouse disk full", ["whatif", MIXED_ID[:12], "--host-speedup", "2", "--save",
                                                         "-q"], "taxbreak.duckdb", space,
                  env={"TAXBREAK_FAULT_POINT": "before_commit=no_space"}),
        FaultCase("report: read-only folder", ["report"], "reports/", ro, patch=_REPORT_READ_ONLY),
        FaultCase("export: disk full", ["export", MIXED_ID[:12], "-o", "x.chrome.json"], "x.chrome.json", space,
                  patch=_EXPORT_FULL),
    ]


def run_faults(work: Path, *, fast: bool = False, log: Callable[[str], None] = lambda s: None) -> Tally:
    """Each ``fault_cases`` command on a copy of an analysed home with its fault, then again without it."""
    tally = Tally("ordinary faults")
    base = work / "faults"
    base.mkdir(parents=True, exist_ok=True)
    template = _analysed_home(base)
    for i, case in enumerate(fault_cases()):
        home = base / f"case{i}"
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(template, home, ignore=shutil.ignore_patterns(".readers", "*.lock"))
        if case.setup is not None:
            case.setup(home)
        before = home_digest(home)
        proc = _run_cli(home, case.argv, case.patch, case.env)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        want = f"taxbreak: {home / case.path}" if not case.path.endswith("/") else f"taxbreak: {home}/{case.path}"
        if "Traceback" in proc.stderr or proc.returncode not in (0, 1):
            outcome, note = "crash", f"exit {proc.returncode}: {proc.stderr[-300:]}"
        elif proc.returncode == 0:
            outcome, note = "silent wrong", "exit 0 under the fault"
        elif len(lines) != 1 or not lines[0].startswith(want) or f": {case.cause} — " not in lines[0] \
                or f"then run `taxbreak {case.argv[0]}` again" not in lines[0]:
            outcome, note = "unclear error", " | ".join(lines)[-300:]
        elif (case.restore(home, template) if case.restore is not None else None) or home_digest(home) != before:
            after = home_digest(home)  # (the fault undone first: a lake the fault removed is put back)
            changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
            outcome, note = "data lost", f"the failed command changed {changed[:3]}"
        else:
            again = _run_cli(home, case.argv)
            outcome, note = ("clear error", "") if again.returncode == 0 else (
                "data lost", f"without the fault it still fails: {again.stderr[-300:]}")
        tally.add(outcome, case.name, note)
        log(f"  {case.name:40s} {outcome:14s} {(lines or [''])[-1][:140]}")
    tally_replay(base, template, tally, log)
    tally_retry_tables(base, template, tally, log)
    return tally


def tally_replay(base: Path, template: Path, tally: Tally, log: Callable[[str], None]) -> None:
    """A failure recorded by an earlier ingest (a full disk, before this rule kept such failures out of the
    catalogue), replayed by the next ingest of the same bytes: said to be earlier, with the retry that works."""
    from taxbreak.ingest import Lake

    home = base / "replay"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(template, home, ignore=shutil.ignore_patterns(".readers", "*.lock"))
    _failed_trace(home)
    proc = _run_cli(home, ["ingest", "-q", "in"])
    first = (proc.stderr.splitlines() or [""])[0]
    name = "ingest: a failure recorded earlier"
    if "Traceback" in proc.stderr:
        tally.add("crash", name, proc.stderr[-300:])
    elif not (first.startswith("FAILED earlier (") and " UTC; " in first and "`taxbreak retry t.json`" in first):
        tally.add("unclear error", name, first[:300])
    else:
        retry = _run_cli(home, ["retry", "t.json", "-q"])
        row = [r for r in Lake(home / "lake").catalogue().to_pylist() if r["file_name"] == "t.json"]
        ok = retry.returncode == 0 and row and row[0]["status"] == "ingested"
        tally.add("clear error" if ok else "unclear error", name,
                  "" if ok else f"the retry it names did not store it: {retry.stderr[-300:]}")
    log(f"  {name:40s} {first[:140]}")


def _failed_trace(home: Path) -> Path:
    """t.json in ``home/in``, recorded as failed by an earlier ingest (a full disk, before such failures stayed out
    of the catalogue)."""
    from taxbreak.ingest import Lake, file_sha256

    _new_trace(home)
    trace = home / "in" / "t.json"
    Lake(home / "lake").record_failure(
        file_sha256(trace), file_name="t.json", source_path=str(trace), file_bytes=trace.stat().st_size,
        error=f"{trace}: unexpected OSError while ingesting: [Errno 28] No space left on device",
        source_format="kineto", status="failed")
    return trace


def tally_retry_tables(base: Path, template: Path, tally: Tally, log: Callable[[str], None]) -> None:
    """``taxbreak retry`` whose ingest succeeds and whose tables fail at the warehouse's COMMIT (a full disk): one
    line naming the warehouse and saying to run analyze for the trace (a second retry finds no failed trace), the
    tables as they were; that analyze builds them without ingesting the trace again, and a second retry does not
    ingest it again either."""
    from taxbreak.ingest import Lake

    home = base / "retry-tables"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(template, home, ignore=shutil.ignore_patterns(".readers", "*.lock"))
    _failed_trace(home)
    tables = {k: v for k, v in home_digest(home).items() if k.startswith("table ")}
    proc = _run_cli(home, ["retry", "t.json", "-q"], env={"TAXBREAK_FAULT_POINT": "before_commit=no_space"})
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    name = "retry: warehouse disk full at COMMIT"
    want = f"taxbreak: {home / 'taxbreak.duckdb'}: no space left on the device — free space there, then run `"
    rows = [r for r in Lake(home / "lake").catalogue().to_pylist() if r["file_name"] == "t.json"]
    if "Traceback" in proc.stderr or proc.returncode not in (0, 1):
        outcome, note = "crash", f"exit {proc.returncode}: {proc.stderr[-300:]}"
    elif proc.returncode == 0:
        outcome, note = "silent wrong", "exit 0 under the fault"
    elif len(lines) != 1 or not lines[0].startswith(want + "taxbreak analyze --trace "):
        outcome, note = "unclear error", " | ".join(lines)[-300:]
    elif {k: v for k, v in home_digest(home).items() if k.startswith("table ")} != tables:
        outcome, note = "data lost", "the failed retry changed the warehouse tables"
    elif not rows or rows[0]["status"] != "ingested":
        outcome, note = "silent wrong", f"the retried trace is {rows[0]['status'] if rows else 'gone'}"
    else:
        stored = lake_checksum(home / "lake")
        named = lines[0][len(want):].split("`")[0].split()[1:]  # the analyze the line names
        again = _run_cli(home, named)
        built = _run_cli(home, ["sql", "--format", "csv", "SELECT count(*) AS n FROM trace_meta"]).stdout.split()
        second = _run_cli(home, ["retry", "t.json"])
        if again.returncode != 0 or built != ["n", "2"]:
            outcome, note = "data lost", f"the analyze it names did not build the tables: {again.stderr[-300:]}"
        elif lake_checksum(home / "lake") != stored:
            outcome, note = "silent wrong", "the trace was ingested again"
        elif second.returncode != 2 or "t.json is ingested" not in second.stderr:
            outcome, note = "unclear error", f"a second retry: {second.stderr[-300:]}"
        else:
            outcome, note = "clear error", ""
    tally.add(outcome, name, note)
    log(f"  {name:40s} {outcome:14s} {(lines or [''])[-1][:140]}")


def _hostile_kernel_trace() -> bytes:
    """A small Kineto trace whose kernels carry names that are markup."""
    events = _kineto_events(12, 3)
    names = ["x<!--<script>", "</script><script>document.title='owned'</script>", "a\"b'c&amp;d", "l\u2028s\u2029"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    for i, e in enumerate(kernels):
        e["name"] = names[i % len(names)]
    return trace_bytes(events)


def _timeline_block(page: str) -> str | None:
    """The timeline's data block as an HTML parser ends it (at the first ``</script``), or None without one."""
    start = page.find("id='tl-data'>")
    if start < 0:
        return None
    start += len("id='tl-data'>")
    return page[start:page.lower().find("</script", start)]


def run_readers(work: Path, log: Callable[[str], None] = lambda s: None) -> Tally:
    """What readers are owed (issue 30 item 6 and item 1's sandbox): one snapshot for a session's whole life, a
    timeline whatever the kernels are named, a folder of links said to be links, a forged manifest refused aloud,
    no reader's statement that writes a file a writer reads."""
    tally = Tally("readers")
    base = work / "readers"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    template = _analysed_home(work / "faults")
    for name, check in (("a session across a republish", _session_across_a_republish),
                        ("a second session in one process", _second_session_in_process),
                        ("kernels named as markup", _hostile_timeline),
                        ("a folder of symbolic links", _links_only),
                        ("a forged marts manifest", _forged_manifest),
                        ("sandbox: statements that write", _sandbox_writes)):
        home = base / name.split(":")[0].replace(" ", "_")
        shutil.copytree(template, home, ignore=shutil.ignore_patterns(".readers", "*.lock"))
        try:
            outcome, note = check(home)
        except Exception as exc:  # noqa: BLE001 - the finding
            outcome, note = "crash", f"{type(exc).__name__}: {exc}"
        tally.add(outcome, name, note)
        log(f"  {name:40s} {outcome:14s} {note[:140]}")
    return tally


def _session_across_a_republish(home: Path) -> tuple[str, str]:
    from sql.scenarios import MIXED_ID

    from taxbreak.engine.runner import publish
    from taxbreak.store.marts import collect
    from taxbreak.store.query import open_readonly

    db, query = home / "taxbreak.duckdb", "SELECT model FROM trace_meta"
    if _run_cli(home, ["analyze", "-q"]).returncode != 0:  # (the copied home's snapshot names the template's marts)
        return "crash", "analyze failed"
    opened = open_readonly(db, home / "lake", prefer="snapshot")  # (the copied home's file times may differ)
    try:
        seen = opened.con.execute(query).fetchall()
        publish(db, lambda con: con.execute("UPDATE trace_meta SET model = 'republished'"), traces=[MIXED_ID],
                tables=["trace_meta"])
        collect(db, keep_s=0)  # a writer past the grace period: still nothing an open reader reads goes
        again = opened.con.execute(query).fetchall()
    finally:
        opened.close()
    fresh = _run_cli(home, ["sql", "--format", "csv", query]).stdout.split()
    if again != seen:
        return "silent wrong", f"one session read {seen} then {again}"
    if fresh != ["model", "republished"]:
        return "silent wrong", f"a new reader read {fresh}"
    return "ok", ""


def _second_session_in_process(home: Path) -> tuple[str, str]:
    """A notebook's second `tb.open()` while a writer publishes: the session opened after the republish reads the
    new snapshot (DuckDB shared the first session's instance of the replaced file), and keeps it while the first
    session closes and writers collect and publish again."""
    from sql.scenarios import MIXED_ID

    from taxbreak.engine.runner import publish
    from taxbreak.store.marts import collect
    from taxbreak.store.query import open_readonly

    db, query = home / "taxbreak.duckdb", "SELECT model FROM trace_meta"
    if _run_cli(home, ["analyze", "-q"]).returncode != 0:  # (the copied home's snapshot names the template's marts)
        return "crash", "analyze failed"

    def rename(model: str) -> None:
        publish(db, lambda con: con.execute("UPDATE trace_meta SET model = ?", [model]), traces=[MIXED_ID],
                tables=["trace_meta"])

    first = open_readonly(db, home / "lake", prefer="snapshot")
    try:
        first.con.execute(query).fetchall()
        rename("republished")
        second = open_readonly(db, home / "lake", prefer="snapshot")
    finally:
        first.close()
    try:
        seen = second.con.execute(query).fetchall()
        collect(db, keep_s=0)  # the first session's files may go now, never the second's
        rename("again")
        collect(db, keep_s=0)
        later = second.con.execute(query).fetchall()
    finally:
        second.close()
    if seen != [("republished",)]:
        return "silent wrong", f"a session opened after the republish read {seen}"
    if later != seen:
        return "silent wrong", f"one session read {seen} then {later}"
    return "ok", ""


def _hostile_timeline(home: Path) -> tuple[str, str]:
    (home / "in").mkdir()
    (home / "in" / "markup.json").write_bytes(_hostile_kernel_trace())
    for argv in (["ingest", "-q", "in"], ["analyze", "-q"], ["report", "-q", "-o", str(home / "rep")]):
        proc = _run_cli(home, argv)
        if proc.returncode != 0:
            return "crash", f"{argv[0]}: {proc.stderr[-300:]}"
    pages = [p for p in (home / "rep" / "traces").glob("*.html") if "x&lt;!--&lt;script&gt;" in p.read_text()
             or "x\\u003c!--" in p.read_text()]
    if not pages:
        return "silent wrong", "no trace page lists the kernels"
    return judge_timeline(pages[0].read_text(encoding="utf-8"), "x<!--<script>")


def judge_timeline(page: str, name: str) -> tuple[str, str]:
    """ok when the page's timeline data block is data a browser hands whole to JSON.parse and holds ``name``."""
    block = _timeline_block(page)
    if block is None:
        return "silent wrong", "the page has no timeline"
    if "<!--" in block or "<script" in block.lower():  # a browser's parser runs past the block's end
        return "escapes", "a kernel name is markup inside the timeline's data block"
    try:
        names = json.loads(block)["names"]
    except ValueError as exc:
        return "escapes", f"the timeline's data is cut short ({exc})"
    if name not in names:
        return "silent wrong", "the hostile name is not in the timeline's data"
    return "ok", ""


def _links_only(home: Path) -> tuple[str, str]:
    folder = home / "links"
    folder.mkdir()
    (folder / "a.json").symlink_to(home / "lake")
    (folder / "b.json").symlink_to("/etc/hostname")
    proc = _run_cli(home, ["ingest", str(folder)])
    if "Traceback" in proc.stderr:
        return "crash", proc.stderr[-300:]
    if proc.returncode == 2 and "2 symbolic links skipped" in proc.stderr and str(folder) in proc.stderr:
        return "clear error", ""
    return "unclear error", proc.stderr.strip()[-300:]


def _forged_manifest(home: Path) -> tuple[str, str]:
    victim = home / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    path = home / "marts" / "_manifest.json"
    data = json.loads(path.read_text())
    data["replaced"].append(["../victim", 0])
    path.write_text(json.dumps(data))
    proc = _run_cli(home, ["analyze", "-q"])
    if not (victim / "keep.txt").exists():
        return "escapes", "a writer deleted a folder outside the marts"
    if proc.returncode != 0:
        return "crash", proc.stderr[-300:]
    if f"taxbreak: {path}: refused, not acted on: replaced: ['../victim', 0]" not in proc.stderr:
        return "unclear error", f"refused in silence: {proc.stderr[-200:]!r}"
    return "clear error", ""


def _sandbox_writes(home: Path) -> tuple[str, str]:
    (part,) = (home / "lake" / "events").glob("trace_id=*/part-0.parquet")
    before = home_digest(home)
    refused = 0
    queries = [f"COPY (SELECT * FROM events LIMIT 1) TO '{part}' (FORMAT parquet)",
               f"COPY (SELECT 1 AS x) TO '{home / 'marts' / '_manifest.json'}'",
               f"EXPORT DATABASE '{home / 'exports' / 'dump'}'",
               f"PREPARE p AS COPY (SELECT 1 AS x) TO '{home / 'marts' / 'x.csv'}'"]
    for q in queries:
        proc = _run_cli(home, ["sql", q])
        refused += proc.returncode == 1 and "statements are not run by the sandbox" in proc.stderr
    if home_digest(home) != before:
        return "escapes", "a reader's statement changed the lake, marts or exports"
    return ("clear error", "") if refused == len(queries) else ("unclear error", f"{refused} of 4 refused aloud")


# -- everything -------------------------------------------------------------------------------------------------
def run_all(work: Path, *, fast: bool = False, random_kills: int = 10, processes: int = 4, rounds: int = 2,
            log: Callable[[str], None] = lambda s: None) -> list[Tally]:
    work.mkdir(parents=True, exist_ok=True)
    out = [run_corpus(work, fast=fast, log=log)]
    out.append(run_crashes(work, random_kills=random_kills, fast=fast, log=log))
    out.append(run_concurrency(work, processes=processes, rounds=rounds, fast=fast, log=log))
    out.append(run_forget_races(work, races=2 if fast else 6, log=log))
    out.append(run_replaced_file(work, log=log))
    out.append(run_s3(work, log=log))
    out.append(run_analysis_flags(work, log=log))
    out.append(run_faults(work, fast=fast, log=log))
    out.append(run_readers(work, log=log))
    return out


def table(tallies: list[Tally]) -> str:
    width = max(len(t.section) for t in tallies) + 2
    head = "".join(f"{c:>14s}" for c in COLUMNS)
    lines = [f"{'':{width}s}{head}"]
    total = dict.fromkeys(COLUMNS, 0)
    for t in tallies:
        lines.append(f"{t.section:{width}s}" + "".join(f"{t.counts[c]:>14d}" for c in COLUMNS))
        for c in COLUMNS:
            total[c] += t.counts[c]
    lines.append(f"{'total':{width}s}" + "".join(f"{total[c]:>14d}" for c in COLUMNS))
    return "\n".join(lines)
