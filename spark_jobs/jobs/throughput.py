"""The throughput and skew job: how fast each topic and partition was written, and which
partitions and keys carry more than their share.

Owns the pure transforms
- `bucket_throughput(batches, bucket_ms, by)`: records, bytes, records_per_s, bytes_per_s
  per bucket of batch max_timestamp (the time a batch was closed by its producer, or
  appended with LogAppendTime), per topic or per topic and partition;
- `partition_shares(batches)`: each partition's share of its topic's records against the
  mean share (1 / partitions); hot when over HOT_FACTOR times the mean, as Cruise Control
  flags a broker outside its balance band;
- `hot_keys(records, top)`: the most frequent keys per topic, with the partition each went
  to and its share of the topic and of that partition: keyed hash routing sends every
  record of a key to one partition, so one heavy key makes a hot partition;
and `run(spark, ctx)`. Control batches, batches that failed to decode and the internal
topics (names starting "__") are left out of the skew tables, not of the throughput.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult

if TYPE_CHECKING:
    import pandas as pd  # pandas ships no types: this names what toPandas() returns

__all__ = ["HOT_FACTOR", "data_batches", "pick_bucket_ms", "bucket_throughput",
           "partition_shares", "hot_keys", "HOT_KEY_COLUMNS", "run"]

HOT_FACTOR = 1.5
# What hot_keys reads of the records (besides topic and partition): the whole log is decoded
# for it, so the scan builds no other column (spark_jobs.tables.records).
HOT_KEY_COLUMNS = ("key", "is_control", "error")
BUCKETS = (1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000)


def data_batches(batches: DataFrame) -> DataFrame:
    return batches.where(F.col("error").isNull() & F.col("last_offset").isNotNull()
                         & ~F.coalesce(F.col("is_control"), F.lit(False)))


def pick_bucket_ms(span_ms: int, max_buckets: int = 600) -> int:
    """The smallest of BUCKETS giving at most `max_buckets` over the span."""
    for b in BUCKETS:
        if span_ms // b < max_buckets:
            return b
    return BUCKETS[-1]


def bucket_throughput(batches: DataFrame, bucket_ms: int = 1_000,
                      by: tuple[str, ...] = ("topic",)) -> DataFrame:
    """(*by), bucket_ts, records, bytes, batches, records_per_s, bytes_per_s."""
    b = data_batches(batches).withColumn(
        "bucket_ts", (F.floor(F.col("max_timestamp") / bucket_ms) * bucket_ms).cast("long"))
    per_s = 1000.0 / bucket_ms
    return (b.groupBy(*by, "bucket_ts")
            .agg(F.sum("record_count").cast("long").alias("records"),
                 F.sum("batch_size").cast("long").alias("bytes"),
                 F.count(F.lit(1)).alias("batches"))
            .withColumn("records_per_s", F.col("records") * per_s)
            .withColumn("bytes_per_s", F.col("bytes") * per_s)
            .orderBy(*by, "bucket_ts"))


def _user_topics(df: DataFrame) -> DataFrame:
    return df.where(~F.col("topic").startswith("__"))


def partition_shares(batches: DataFrame, hot_factor: float = HOT_FACTOR) -> DataFrame:
    """topic, partition, records, bytes, share, mean_share, share_vs_mean, hot.
    Partitions are those with at least one batch in the log."""
    per = (_user_topics(data_batches(batches)).groupBy("topic", "partition")
           .agg(F.sum("record_count").cast("long").alias("records"),
                F.sum("batch_size").cast("long").alias("bytes")))
    t = Window.partitionBy("topic")
    return (per.withColumn("share", F.col("records") / F.sum("records").over(t))
            .withColumn("mean_share", 1.0 / F.count(F.lit(1)).over(t))
            .withColumn("share_vs_mean", F.col("share") / F.col("mean_share"))
            .withColumn("hot", F.col("share_vs_mean") > hot_factor)
            .orderBy("topic", "partition"))


def _key_text(key):
    """The key as text when it is UTF-8, else as hex (keys are bytes on the wire)."""
    text = key.cast("string")  # no check here: decode() would raise on a bad byte
    return F.when(F.is_valid_utf8(text), text).otherwise(
        F.concat(F.lit("0x"), F.lower(F.hex(key))))


def hot_keys(records: DataFrame, top: int = 10) -> DataFrame:
    """topic, rank, key, partition, records, topic_share, partition_share: the `top` keys
    per topic by record count (null keys are spread by the partitioner, not routed: left
    out)."""
    r = _user_topics(records).where(F.col("error").isNull()
                                    & ~F.coalesce(F.col("is_control"), F.lit(False)))
    per_key = r.groupBy("topic", "partition", "key").agg(F.count(F.lit(1)).alias("records"))
    # The partition and topic totals are window sums over the same per-key counts (null key
    # included), not a second aggregate joined back: the records, the whole log decoded,
    # are scanned once.
    ranked = (per_key
              .withColumn("_p", F.sum("records").over(Window.partitionBy("topic", "partition")))
              .withColumn("_t", F.sum("records").over(Window.partitionBy("topic")))
              .where(F.col("key").isNotNull())
              .withColumn("rank", F.row_number().over(
                  Window.partitionBy("topic")
                  .orderBy(F.col("records").desc(), "partition", "key"))))
    return (ranked.where(F.col("rank") <= top)
            .select("topic", "rank", _key_text(F.col("key")).alias("key"), "partition",
                    "records", (F.col("records") / F.col("_t")).alias("topic_share"),
                    (F.col("records") / F.col("_p")).alias("partition_share"))
            .orderBy("topic", "rank"))


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("throughput")
    batches = ctx.table(spark, "batches")
    span = data_batches(batches).agg(F.min("max_timestamp"), F.max("max_timestamp")).collect()[0]
    if span[0] is None:
        result.notes.append("no data batches in the log")
        return result
    bucket = pick_bucket_ms(span[1] - span[0])
    # each table runs once (report.Collected): the files, the charts and hot_partitions
    # are all taken from that one result
    topics = report.collect(bucket_throughput(batches, bucket, ("topic",)))
    partitions = bucket_throughput(batches, bucket, ("topic", "partition"))
    shares = report.collect(partition_shares(batches))
    keys = hot_keys(ctx.records(spark, HOT_KEY_COLUMNS))
    result.tables.update(topic_throughput=topics, partition_throughput=partitions,
                         partition_shares=shares, hot_keys=keys)
    result.show += ["hot_partitions", "hot_keys"]
    result.tables["hot_partitions"] = shares.where("hot")
    result.notes.append(f"throughput in {bucket / 1000:g} s buckets of batch max_timestamp; a "
                        f"partition is hot above {HOT_FACTOR}x its topic's mean share")

    out_dir = ctx.job_dir("throughput")
    span = ctx.time_span(spark)
    pdf: pd.DataFrame = topics.pandas()
    for column, unit, name in (("records_per_s", "records / s", "records_per_s.png"),
                               ("bytes_per_s", "bytes / s", "bytes_per_s.png")):
        series = {t: (g["bucket_ts"].tolist(), g[column].tolist())
                  for t, g in pdf.groupby("topic")}
        result.charts.append(report.lines(out_dir / name, series,
                                          f"{unit} per topic", unit, span=span,
                                          bucket_ms=bucket))
    sdf: pd.DataFrame = shares.pandas()
    user_topics = sdf.groupby("topic")["records"].sum().sort_values(ascending=False)
    for topic in list(user_topics.index)[:3]:
        g = sdf[sdf.topic == topic].sort_values("partition")
        mean = float(g["mean_share"].iloc[0])
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in topic)
        result.charts.append(report.bars(
            out_dir / f"shares_{safe}.png", [str(p) for p in g["partition"]],
            g["share"].tolist(), f"{topic}: share of records per partition", "share",
            hlines=[(mean, "mean share"), (mean * HOT_FACTOR, f"{HOT_FACTOR}x mean (hot)")],
            highlight=g["hot"].tolist()))
    return result
