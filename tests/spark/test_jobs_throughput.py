"""The throughput job on crafted batches and records: per-bucket rates, hot partitions
against 1.5x the mean share, and the hot keys behind them (a binary key printed as hex)."""

from __future__ import annotations

from spark_jobs.jobs import frame
from spark_jobs.jobs.throughput import bucket_throughput, hot_keys, partition_shares
from spark_jobs.tables import BATCHES_SCHEMA, RECORDS_SCHEMA


def test_rates_shares_and_hot_keys(spark):
    # partition 0 gets 70 records, 1 and 2 get 15 each: mean share 1/3, p0 at 2.1x
    sizes = {0: [40, 30], 1: [15], 2: [15]}
    batches = frame(spark, BATCHES_SCHEMA, [
        {"topic": "t", "partition": p, "base_offset": 0, "last_offset": n - 1,
         "record_count": n, "max_timestamp": 1_000 + 1_500 * i, "batch_size": 10 * n,
         "batch_position": 0, "crc_valid": True, "segment": "s", "is_control": False}
        for p, ns in sizes.items() for i, n in enumerate(ns)] + [
        {"topic": "t", "partition": 1, "base_offset": 15, "last_offset": 15, "record_count": 1,
         "max_timestamp": 1_000, "batch_size": 61, "batch_position": 0, "crc_valid": True,
         "segment": "s", "is_control": True}])  # a transaction marker: not data
    rates = [tuple(r) for r in bucket_throughput(batches, 1_000).collect()]
    assert rates == [("t", 1_000, 70, 700, 3, 70.0, 700.0), ("t", 2_000, 30, 300, 1, 30.0, 300.0)]
    shares = {r["partition"]: (r["records"], round(r["share"], 2), r["hot"])
              for r in partition_shares(batches).collect()}
    assert shares == {0: (70, 0.7, True), 1: (15, 0.15, False), 2: (15, 0.15, False)}

    keys = [b"hot"] * 60 + [b"\xff\x00"] * 10 + [b"a", b"b"] * 5 + [None] * 20
    parts = [0] * 70 + [1] * 10 + [2] * 20
    records = frame(spark, RECORDS_SCHEMA, [
        {"topic": "t", "partition": p, "offset": i, "key": k, "base_offset": 0,
         "batch_position": 0, "crc_valid": True, "segment": "s", "is_control": False}
        for i, (k, p) in enumerate(zip(keys, parts))])
    top = [(r["rank"], r["key"], r["partition"], r["records"], round(r["topic_share"], 2),
            round(r["partition_share"], 3)) for r in hot_keys(records, top=3).collect()]
    assert top == [(1, "hot", 0, 60, 0.6, 0.857), (2, "0xff00", 0, 10, 0.1, 0.143),
                   (3, "a", 1, 5, 0.05, 0.5)]
