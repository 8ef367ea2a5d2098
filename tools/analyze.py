"""`minibroker analyze`: run the Spark analysis jobs over a broker's data directory.

    minibroker analyze --data-dir DIR [DIR ...] --out OUT [--job NAME ...] [--master URL]
                       [--at TIMESTAMP] [--consumer-events BENCH_DIR] [--chaos HISTORY ...]
    minibroker analyze --chaos chaos-out/seed-7 --out OUT     (a chaos run, charted)
    python -m tools.analyze ...                 (the same)
    spark-submit --py-files analysis.zip tools/analyze.py ...   (docs/ANALYSIS.md)

Owns argument parsing, the run loop (one progress line per job on stderr, e.g.
"[lag] 3.2 s, 5 tables"), writing the tables and report through spark_jobs.report, the
`--at` replay's text (`render_describe`: the lag job computes what `groups describe` would
have shown, tools.groups prints it, so the text is the tool's own), and the exit status: 0;
2 with one line on stderr when Java is missing, the data directory does not exist or an
argument is wrong. Several data directories (`--data-dir` repeated, or several after one)
are a cluster's brokers, one each, analysed as one: their event logs merged (an event found
twice kept once, in time order) and each partition's log read from one of its replicas
(spark_jobs.tables). The master: --master wins; else a running session's (spark-submit) or
MASTER / PYSPARK_SUBMIT_ARGS; else local[*] (spark_jobs.session).

It lives in tools/, not spark_jobs/: spark_jobs is the analysis library and imports none of
the tools; the command line around it may.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # run as a script (spark-submit tools/analyze.py): the packages are importable from the
    # --py-files archive, or from the checkout this file lives in
    try:
        import spark_jobs  # noqa: F401
        import tools  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_jobs.jobs import EXTRA_JOBS, JOBS, Context, load_job, ms_to_text  # noqa: E402
from tools.groups import GroupDescription, Member, PartitionRow, print_offsets  # noqa: E402

__all__ = ["main", "parse_timestamp", "render_describe"]

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
        prog=PROG, description="Spark analysis of a minibroker data directory (or of every "
        "broker's of a cluster, as one): consumer lag "
        "and Burrow status, rebalances and pauses, throughput and skew, request latency, ISR "
        "health, authentication failures, broker metrics, transactions. Tables (Parquet + CSV), PNG charts and OUT/report.html (docs/ANALYSIS.md).")
    p.add_argument("--data-dir", action="extend", nargs="+", metavar="DIR",
                   dest="data_dirs", default=[],
                   help="the broker's data directory (log.dirs); for a cluster, every "
                        "broker's (repeat the option, or name several): one report of all")
    p.add_argument("--out", required=True, help="where tables, charts and report.html go")
    p.add_argument("--chaos", action="extend", nargs="+", metavar="HISTORY", default=[],
                   help="a `minibroker chaos` run's history.jsonl (or its directory): "
                        "faults charted over throughput and ISR size (the chaos job); "
                        "alone, no --data-dir is needed")
    p.add_argument("--job", action="append", choices=JOBS + EXTRA_JOBS, metavar="NAME",
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


def render_describe(described: dict[str, Any], group: str) -> tuple[str, str]:
    """(stdout, stderr) exactly as `minibroker groups describe GROUP` prints them, for the
    view spark_jobs.jobs.lag.describe_at replayed, by tools.groups' own printer."""
    members = []
    by_id = {}
    for m in described["members"]:
        assignment: dict[str, list[int]] = {}
        for tp in m["assignment"]:
            topic, _, partition = tp.rpartition("-")
            assignment.setdefault(topic, []).append(int(partition))
        member = Member(m["member_id"], m["group_instance_id"], m["client_id"],
                        m["client_host"], assignment)
        members.append(member)
        by_id[m["member_id"]] = member
    rows = [PartitionRow(r["topic"], r["partition"], r["current_offset"], r["log_end_offset"],
                         by_id.get(r["consumer_id"]))
            for r in described["rows"].collect()]
    desc = GroupDescription(group, described["state"], "consumer", "", (0, "", 0), members, rows)
    out, err = io.StringIO(), io.StringIO()
    print_offsets(desc, out, err)
    return out.getvalue(), err.getvalue()


def _render_replays(result, ctx: Context) -> None:
    # the lag job leaves what `groups describe` would have shown (--at); the text is ours
    for group, described in result.described.items():
        text, notice = render_describe(described, group)
        result.texts[f"groups describe {group} at {ms_to_text(ctx.at_ms)}"] = notice + text
        (ctx.job_dir(result.name) / f"describe_{group}.txt").write_text(notice + text)


JOB_THREADS = 2


def _run_job(spark, ctx: Context, name: str):
    """One job, its replays and its tables written: (JobResult, {table: write_table's})."""
    from spark_jobs import report
    # a new thread has no active session on the JVM side; pyspark looks it up
    spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
    t = time.monotonic()
    result = load_job(name).run(spark, ctx)
    _render_replays(result, ctx)
    written = {table: report.write_table(df, ctx.out, name, table, head=table in result.show)
               for table, df in result.tables.items()}
    sys.stderr.write(f"[{name}] {time.monotonic() - t:.1f} s, "
                     f"{len(written)} tables, {len(result.charts)} charts\n")
    return result, written


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: {message}\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage line
        return 0 if e.code == 0 else 2
    histories = []
    for history in map(Path, args.chaos):
        history = history / "history.jsonl" if history.is_dir() else history
        if not history.is_file():
            return _fail(f"chaos history {history} does not exist")
        histories.append(history.resolve())
    if not args.data_dirs and not histories:
        return _fail("give --data-dir (a broker's data directory) or --chaos (a history)")
    for data_dir in map(Path, args.data_dirs):
        if not data_dir.is_dir():
            return _fail(f"data directory {data_dir} does not exist")
    # one directory named twice is one broker's, not two copies
    data_dirs = tuple(dict.fromkeys(Path(d).resolve() for d in args.data_dirs)) or tuple(
        dict.fromkeys(h.parent for h in histories))
    bench_dir = Path(args.consumer_events) if args.consumer_events else None
    if bench_dir is not None and not (bench_dir / "consumers").is_dir():
        return _fail(f"{bench_dir} has no consumers/ directory of consumer events")
    default_jobs = (JOBS if args.data_dirs else ()) + (EXTRA_JOBS if histories else ())
    jobs = list(dict.fromkeys(args.job or default_jobs))
    if "chaos" in jobs and not histories:
        return _fail("the chaos job needs --chaos HISTORY")
    if set(jobs) - {"chaos"} and not args.data_dirs:
        return _fail("jobs other than chaos need --data-dir")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from spark_jobs import report
    from spark_jobs.session import JavaMissing, get_spark
    started = time.monotonic()
    try:
        # the log's data source is registered only if a table needs it (spark_jobs.tables)
        spark = get_spark(master=args.master, data_source=False)
    except JavaMissing as e:
        return _fail(str(e))
    # the jobs' plans are wide: without this Spark warns that it truncated a plan's text
    spark.conf.set("spark.sql.debug.maxToStringFields", "1000")
    sys.stderr.write(f"[spark] {spark.sparkContext.master}, "
                     f"{time.monotonic() - started:.1f} s to start\n")

    ctx = Context(data_dir=data_dirs[0] if len(data_dirs) == 1 else data_dirs,
                  out=out.resolve(), at_ms=args.at,
                  consumer_events_dir=bench_dir.resolve() if bench_dir else None,
                  chaos_histories=tuple(histories))
    results, written = [], {}
    # The jobs run side by side, JOB_THREADS at a time: on small data a job's time is mostly
    # the driver's (building and planning its queries, one core), so two of them keep the
    # machine's two cores busy. The report still lists them in the order asked.
    pool = ThreadPoolExecutor(max_workers=JOB_THREADS, thread_name_prefix="analyze")
    try:
        futures = [pool.submit(_run_job, spark, ctx, name) for name in jobs]
        for name, future in zip(jobs, futures):
            result, written[name] = future.result()
            results.append(result)
        # the charts' one time axis (the jobs that draw against time have asked already)
        span = ctx.time_span(spark) if args.data_dirs else None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        ctx.release()
    preamble = [(f"data directory: {data_dirs[0]}" if len(data_dirs) == 1 else
                 f"data directories: {', '.join(map(str, data_dirs))}") if args.data_dirs
                else f"chaos histories: {', '.join(map(str, histories))}",
                f"Spark master: {spark.sparkContext.master}; jobs: {', '.join(jobs)}"]
    if span is not None:
        preamble.append(f"time axis of every chart: seconds since {ms_to_text(span[0])}, the "
                        f"first event, to {ms_to_text(span[1])}, the last")
    if args.at is not None:
        preamble.append(f"--at {ms_to_text(args.at)}")
    page = report.write_html(ctx.out, results, written, preamble=preamble)
    sys.stderr.write(f"[report] {page} ({time.monotonic() - started:.1f} s in all)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
