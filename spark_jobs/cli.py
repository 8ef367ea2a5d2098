"""`minibroker analyze`: run the Spark analysis jobs over a broker's data directory.

    minibroker analyze --data-dir DIR --out OUT [--job NAME ...] [--master URL]
                       [--at TIMESTAMP] [--consumer-events BENCH_DIR]
    python -m spark_jobs ...                    (the same)
    spark-submit --py-files analysis.zip spark_jobs/cli.py ...   (docs/ANALYSIS.md)

Owns argument parsing, the run loop (one progress line per job on stderr, e.g.
"[lag] 3.2 s, 5 tables"), writing the tables and report through spark_jobs.report, and the
exit status: 0; 2 with one line on stderr when Java is missing, the data directory does not
exist or an argument is wrong. The master: --master wins; else a running session's
(spark-submit) or MASTER / PYSPARK_SUBMIT_ARGS; else local[*] (spark_jobs.session).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):
    # run as a script (spark-submit spark_jobs/cli.py): the package is importable from the
    # --py-files archive, or from the checkout this file lives in
    try:
        import spark_jobs  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.jobs import JOBS, Context, load_job, ms_to_text  # noqa: E402

__all__ = ["main", "parse_timestamp"]

PROG = "minibroker analyze"


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds, or ISO-8601 (UTC unless it names a zone) -> epoch ms."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a timestamp: {text!r} (epoch milliseconds or ISO-8601, e.g. "
            f"2026-01-31T12:00:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Spark analysis of a minibroker data directory: consumer lag "
        "and Burrow status, rebalances and pauses, throughput and skew, request latency, ISR "
        "health. Tables (Parquet + CSV), PNG charts and OUT/report.html (docs/ANALYSIS.md).")
    p.add_argument("--data-dir", required=True, help="the broker's data directory (log.dirs)")
    p.add_argument("--out", required=True, help="where tables, charts and report.html go")
    p.add_argument("--job", action="append", choices=JOBS, metavar="NAME",
                   help=f"run only this job (repeatable; default all: {', '.join(JOBS)})")
    p.add_argument("--master", default=None, metavar="URL",
                   help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--at", type=parse_timestamp, default=None, metavar="TIMESTAMP",
                   help="also replay `minibroker groups describe` as of this time "
                        "(epoch ms or ISO-8601)")
    p.add_argument("--consumer-events", default=None, metavar="BENCH_DIR",
                   help="a `minibroker bench rebalance` output directory: adds partition "
                        "and member pauses and consumer throughput to the rebalances job")
    return p


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: {message}\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage line
        return 0 if e.code == 0 else 2
    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        return _fail(f"data directory {data_dir} does not exist")
    bench_dir = Path(args.consumer_events) if args.consumer_events else None
    if bench_dir is not None and not (bench_dir / "consumers").is_dir():
        return _fail(f"{bench_dir} has no consumers/ directory of consumer events")
    jobs = list(dict.fromkeys(args.job or JOBS))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from spark_jobs import report
    from spark_jobs.session import JavaMissing, get_spark
    started = time.monotonic()
    try:
        spark = get_spark(master=args.master)
    except JavaMissing as e:
        return _fail(str(e))
    # the jobs' plans are wide: without this Spark warns that it truncated a plan's text
    spark.conf.set("spark.sql.debug.maxToStringFields", "1000")
    sys.stderr.write(f"[spark] {spark.sparkContext.master}, "
                     f"{time.monotonic() - started:.1f} s to start\n")

    ctx = Context(data_dir=data_dir.resolve(), out=out.resolve(), at_ms=args.at,
                  consumer_events_dir=bench_dir.resolve() if bench_dir else None)
    results, written = [], {}
    try:
        for name in jobs:
            t = time.monotonic()
            result = load_job(name).run(spark, ctx)
            written[name] = {table: report.write_table(df, ctx.out, name, table)
                             for table, df in result.tables.items()}
            results.append(result)
            sys.stderr.write(f"[{name}] {time.monotonic() - t:.1f} s, "
                             f"{len(written[name])} tables, {len(result.charts)} charts\n")
    finally:
        ctx.release()
    preamble = [f"data directory: {ctx.data_dir}",
                f"Spark master: {spark.sparkContext.master}; jobs: {', '.join(jobs)}"]
    if args.at is not None:
        preamble.append(f"--at {ms_to_text(args.at)}")
    page = report.write_html(ctx.out, results, written, preamble=preamble)
    sys.stderr.write(f"[report] {page} ({time.monotonic() - started:.1f} s in all)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
