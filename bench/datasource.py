"""Benchmark of the minibroker-log Spark data source: rows/s of records() and batches().

    .venv/bin/python -m bench.datasource                    # ~1 GB under /tmp
    .venv/bin/python -m bench.datasource --size-mb 200
    .venv/bin/python -m bench.datasource --data-dir DIR     # reuse a data directory

Without segments in --data-dir, it starts our broker on that directory, writes about
--size-mb of --value-bytes values through confluent-kafka (uncompressed, keyed every other
record) and stops the broker. Then, in one Spark session, it times:
  records: count(*), and a full scan touching key and value (sum(length(value)), count(key));
  batches: count(*) and sum(record_count).
Figures are printed, never asserted: wall-clock rows/s and rows per CPU second of the whole
process tree (driver, JVM and Python workers). The first query also pays worker start-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.common import process_tree_cpu_seconds
from harness.broker import BrokerProcess, BrokerStartError
from spark_jobs.segments import find_segments

TOPIC = "bench-datasource"


def generate(data_dir: Path, size_mb: int, value_bytes: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess(data_dir.parent, data_dir=data_dir,
                           log_path=data_dir.parent / "bench-broker.log", start_timeout_s=30)
    try:
        broker.start()
    except BrokerStartError as e:
        raise SystemExit(str(e)) from None
    try:
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions,
                                      replication_factor=1)])[TOPIC].result(timeout=30)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                             "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_000_000,
                             "acks": 1})
        value = (b"0123456789abcdef" * (value_bytes // 16 + 1))[:value_bytes]
        total = size_mb * 1_000_000 // (value_bytes + 20)  # ~20 bytes of record overhead
        started = time.monotonic()
        for i in range(total):
            while True:
                try:
                    producer.produce(TOPIC, value, key=b"k%d" % (i % 1000) if i % 2 else None,
                                     partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 100_000 == 0:
                producer.poll(0)
        if producer.flush(300):
            raise SystemExit("produce did not finish")
        elapsed = time.monotonic() - started
        print(f"produced {total:,} records of {value_bytes} B in {elapsed:.1f} s", flush=True)
        del producer, admin  # close the clients before the broker goes, quietly
    finally:
        broker.stop(timeout_s=60)


def timed(label: str, rows_label: str, fn):
    """Wall time and CPU seconds of this process tree (driver, JVM, Python workers): the
    machine may be shared, so rows per CPU second is the steadier figure."""
    cpu0, started = process_tree_cpu_seconds(os.getpid()), time.monotonic()
    result = fn()
    elapsed = time.monotonic() - started
    cpu = process_tree_cpu_seconds(os.getpid()) - cpu0
    rows = result[0]
    print(f"{label:<40} {elapsed:7.2f} s {rows / elapsed:11,.0f} {rows_label}/s  "
          f"cpu {cpu:7.1f} s {rows / cpu:11,.0f} {rows_label}/cpu-s  {result}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/minibroker-bench-ds/data"))
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--split-bytes", type=int, default=None)
    parser.add_argument("--master", default=None)
    args = parser.parse_args()

    if not (args.data_dir.is_dir() and find_segments(args.data_dir)):
        generate(args.data_dir, args.size_mb, args.value_bytes, args.partitions)
    segments = find_segments(args.data_dir)
    size = sum(s.size for s in segments)
    print(f"{len(segments)} segments, {size / 1e6:,.0f} MB under {args.data_dir}", flush=True)

    from pyspark.sql import functions as F

    from spark_jobs import tables
    from spark_jobs.session import get_spark

    spark = get_spark(master=args.master, app_name="bench-datasource")
    print(f"master {spark.sparkContext.master}, "
          f"default parallelism {spark.sparkContext.defaultParallelism}", flush=True)

    def reader(level):
        # what tables.records()/batches() build, plus the split_bytes option
        df = spark.read.format(tables.DATA_SOURCE).option("level", level)
        if args.split_bytes:
            df = df.option("split_bytes", args.split_bytes)
        return df.load(str(args.data_dir)).where(F.col("partition") >= 0)

    records = reader("record")
    batches = reader("batch")
    print(f"input partitions: {records.rdd.getNumPartitions()}", flush=True)
    timed("records: count()", "rows", lambda: (records.count(),))
    timed("records: sum(length(value)), count(key)", "rows",
          lambda: tuple(records.agg(F.count(F.lit(1)), F.sum(F.length("value")),
                                    F.count("key")).first()))
    timed("batches: count()", "batches", lambda: (batches.count(),))
    timed("batches: sum(record_count)", "batches",
          lambda: tuple(batches.agg(F.count(F.lit(1)), F.sum("record_count")).first()))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
