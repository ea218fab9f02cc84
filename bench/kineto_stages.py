"""Where the Kineto ingest's time goes: each stage of ``ingest/kineto.py`` run alone, in order, wall and CPU seconds
(all threads of this process), on the synthetic trace of ``bench/gen_kineto.py`` (issue 27).

    python bench/kineto_stages.py --size-mib 128

Stages (each one's input made by the stage before it, its output kept for the next):
- split/copy: the ``traceEvents`` array found, checked and copied into pieces (``_copy_events_array``);
- DuckDB parse: ``read_json`` of the pieces with the fixed column list, rows drained, nothing else;
- per-event SQL + stage write: ``_stage`` (parse included) minus the parse alone;
- stage read-back: the staged rows made relative and given their launching process (``_read_stage``), all held
  for the next stage (so fresh memory for each batch: more than inside an ingest, which frees each batch written);
- lake write: those batches through ``Lake.publish_events`` (checks, redaction, Parquet), from memory;
- end to end: ``ingest_file`` of the file (the stages overlap on their prefetch threads, so it is less than the sum);
- parts of those stages, alone (issue 27): the staged rows written to an Arrow IPC file and read back (the most a
  single pass instead of stage + read-back could save), the secret pre-filters of the lake write (args_json's over
  every row's bytes, the names' over their distinct values), the file's sha256 (the trace id);
- process start-up: a fresh Python importing what an ingest imports (pyarrow, DuckDB, the lake's Parquet, the
  adapters) plus pyarrow's pandas import on its first conversion of a Python value, beside the plain route's
  ``import duckdb``; both are paid once per ingest process (``bench/run_all.py`` runs each ingest in its own).

With ``msgspec`` importable (it is not a dependency), two more rows try issue 27's first lever on the same pieces:
the pieces turned into newline-delimited JSON at C speed (``msgspec`` splits each piece into its elements' raw
bytes and validates it, so a raw newline can only be whitespace; the elements joined by ``\x1e``, then one
``bytes.translate``: CR/LF -> space, ``\x1e`` -> LF) and DuckDB's parse of that (``format='newline_delimited'``).

``--gzip`` adds the inflate of the same trace gzipped (level 6, kept beside it): zlib's (``gzip.GzipFile``, the
ingest's before issue 27) and ISA-L's (``isal.igzip``, the ingest's now), 1 MiB reads as the ingest makes them.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=128, help="size of the synthetic trace (MiB of JSON)")
    ap.add_argument("--out-dir", type=Path, default=HERE / "out", help="where the trace is generated and kept")
    ap.add_argument("--gzip", action="store_true", help="also time the inflate of the trace gzipped")
    args = ap.parse_args(argv)
    import pyarrow as pa

    from taxbreak.ingest import Lake, file_sha256, ingest_file, kineto, redact
    from taxbreak.ingest.base import IngestLimits, TraceInfo

    args.out_dir.mkdir(parents=True, exist_ok=True)
    trace = args.out_dir / f"kineto_synth_{args.size_mib}MiB.json"
    if not trace.exists():
        sys.path.insert(0, str(HERE))
        from gen_kineto import generate

        generate(trace, args.size_mib << 20)
    limits = IngestLimits()
    rows: list[tuple[str, float, float]] = []

    def timed(label: str, fn):  # noqa: ANN001, ANN202
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        rows.append((label, time.perf_counter() - t0, time.process_time() - c0))
        return out

    with tempfile.TemporaryDirectory(dir=args.out_dir, prefix="stages-") as work_s:
        work = Path(work_s)
        copied = timed("split/copy", lambda: kineto._copy_events_array(trace, work, None, limits))
        if copied is None:
            print(f"{trace}: the byte-range route does not apply", file=sys.stderr)
            return 1
        pieces, _meta = copied
        fmt = "array"
        con = kineto._connect(work)

        def parse() -> int:
            src = {"path": [str(p) for p in pieces], "format": fmt, "columns": kineto.READ_COLUMNS}
            reader = con.sql(f"SELECT * FROM {kineto._SOURCE}", params=src).to_arrow_reader(kineto.ROWS_PER_BATCH)
            return sum(b.num_rows for b in reader)

        n = timed("DuckDB parse", parse)
        try:
            import msgspec
        except ImportError:
            msgspec = None
        if msgspec is not None:
            decoder = msgspec.json.Decoder(list[msgspec.Raw])
            table = bytes.maketrans(b"\n\r\x1e", b"  \n")

            def to_ndjson() -> list[Path]:
                out = []
                for i, piece in enumerate(pieces):
                    data = piece.read_bytes()
                    data = (b"" if data.startswith(b"[") else b"[") + data + (b"" if data.endswith(b"]") else b"]")
                    out.append(work / f"nd-{i:05d}.json")
                    out[-1].write_bytes(b"\x1e".join(decoder.decode(data)).translate(table))
                return out

            nd_pieces = timed("  experiment: pieces -> NDJSON", to_ndjson)

            def parse_nd() -> int:
                src = {"path": [str(p) for p in nd_pieces], "format": "newline_delimited",
                       "columns": kineto.READ_COLUMNS}
                reader = con.sql(f"SELECT * FROM {kineto._SOURCE}", params=src).to_arrow_reader(kineto.ROWS_PER_BATCH)
                return sum(b.num_rows for b in reader)

            if timed("  experiment: DuckDB parse NDJSON", parse_nd) != n:
                print("the NDJSON pieces hold other rows than the array pieces", file=sys.stderr)
                return 1
            for p in nd_pieces:
                p.unlink()
        staged = timed("stage", lambda: kineto._stage(con, pieces, fmt, work / "stage.arrows", limits.max_json_depth))
        label, wall, cpu = rows.pop()
        parse_row = next(r for r in rows if r[0] == "DuckDB parse")
        rows.append(("per-event SQL + stage write", wall - parse_row[1], cpu - parse_row[2]))
        con.close()
        batches = timed("stage read-back", lambda: list(kineto._read_stage(work, staged, "t" * 64)))

        def stage_round_trip(batches: list) -> int:  # what one pass instead of stage + read-back could save at most
            with pa.OSFile(str(work / "again.arrows"), "wb") as sink, \
                    pa.ipc.new_stream(sink, batches[0].schema) as w:
                for b in batches:
                    w.write_batch(b)
            with kineto._open_stage(work / "again.arrows") as r:
                return sum(b.num_rows for b in r)

        timed("  of which: IPC write + read alone", lambda held=batches: stage_round_trip(held))
        (work / "again.arrows").unlink()
        timed("  in lake write: secret pre-filters", lambda held=batches: [
            redact._prefilter(b.column(c)) if c == "args_json" else redact.redact_names(b.column(c))
            for b in held for c in ("args_json", "name", "raw_name")])
        timed("  in ingest_file: sha256 of the file", lambda: file_sha256(trace))
        lake = Lake(work / "lake")
        info = TraceInfo(source_format="kineto")
        held = [batches]

        def write() -> None:
            lake.publish_events("t" * 64, iter(held.pop()), info, file_name=trace.name, source_path=str(trace),
                                file_bytes=trace.stat().st_size)

        del batches
        timed("lake write", write)
        timed("end to end (ingest_file)", lambda: ingest_file(trace, Lake(work / "lake2"), tmp_dir=work))

        def process_start() -> None:  # what each ingest process pays before its first byte (the plain route: duckdb)
            code = ("import pyarrow as pa; from taxbreak.ingest import Lake, ingest_file; pa.array([0])"
                    if label == "ours" else "import duckdb")
            subprocess.run([sys.executable, "-c", code], check=True)

        for label in ("ours", "plain"):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            process_start()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            rows.append((f"process start + imports ({'ours, with pandas' if label == 'ours' else 'plain route'})",
                         time.perf_counter() - t0, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime))
    if args.gzip:
        import gzip
        import shutil

        from isal import igzip

        packed = trace.with_suffix(".json.gz")
        if not packed.exists():
            with open(trace, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as out:
                shutil.copyfileobj(src, out, 1 << 20)

        def inflate(opener) -> int:  # noqa: ANN001
            n = 0
            with open(packed, "rb") as raw, opener(fileobj=raw, mode="rb") as fh:
                while chunk := fh.read(1 << 20):
                    n += len(chunk)
            return n

        for label, opener in (("gzip inflate, zlib", gzip.GzipFile), ("gzip inflate, igzip", igzip.GzipFile)):
            if timed(label, lambda opener=opener: inflate(opener)) != trace.stat().st_size:
                print(f"{packed}: inflates to other bytes than {trace}", file=sys.stderr)
                return 1
    mb = trace.stat().st_size / 1e6
    print(f"{trace.name}: {mb:,.0f} MB of JSON, {n:,} events, pieces {len(pieces)} ({fmt})")
    print(f"{'stage':<48} {'wall s':>8} {'CPU s':>8}")
    for label, wall, cpu in rows:
        print(f"{label:<48} {wall:>8.2f} {cpu:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
