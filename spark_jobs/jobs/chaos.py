"""The chaos job: what a `minibroker chaos` run's history (harness/chaos/history.py) shows,
charted as faults over throughput and ISR size.

Owns the pure transforms, each over the history's lines as a DataFrame of one `value`
string column (spark.read.text), so that the heterogeneous operations need no merged
schema:
- `operations(lines)`: time, process, type, f, value (the JSON of the value);
- `faults(ops)`: fault, aim, target, start_s, end_s, duration_s: each nemesis fault, its
  start paired with its end (end null while it never ended);
- `throughput(ops)`: second, acked, sent, uncertain: acknowledgements a second;
- `isr_sizes(ops)`: second, min_isr, max_isr, leaderless: the observer's ISR samples;
- `outcomes(ops)`: process, f, type, count: how every client's operations ended;
and `run(spark, ctx)`, which draws one chart per history: acknowledged writes a second,
the smallest ISR, and each fault as a shaded band labelled with its kind and target.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_jobs.jobs import JobResult

__all__ = ["operations", "faults", "throughput", "isr_sizes", "outcomes", "run"]

_ISR_SCHEMA = "struct<partitions: map<string, struct<leader: int, isr: array<int>>>>"


def operations(lines: DataFrame) -> DataFrame:
    j = F.col("value")
    return (lines.where(F.length(F.trim(j)) > 0).select(
        F.get_json_object(j, "$.index").cast("long").alias("index"),
        F.get_json_object(j, "$.time").cast("double").alias("time"),
        F.get_json_object(j, "$.process").alias("process"),
        F.get_json_object(j, "$.type").alias("type"),
        F.get_json_object(j, "$.f").alias("f"),
        F.get_json_object(j, "$.value").alias("value"))
        .where(F.col("index").isNotNull()))


def faults(ops: DataFrame) -> DataFrame:
    v = F.col("value")
    events = ops.where(F.col("f") == "fault").select(
        "index", "time",
        F.get_json_object(v, "$.fault").alias("fault"),
        F.get_json_object(v, "$.aim").alias("aim"),
        F.get_json_object(v, "$.target").cast("int").alias("target"),
        F.get_json_object(v, "$.phase").alias("phase"))
    # one fault at a time: a start's end is the next event when that is an end
    w = Window.partitionBy(F.lit(0)).orderBy("index")  # few rows: one partition is right
    paired = events.select("*", F.lead("phase").over(w).alias("_next_phase"),
                           F.lead("time").over(w).alias("_next_time"))
    return (paired.where(F.col("phase") == "start").select(
        "fault", "aim", "target", F.round("time", 3).alias("start_s"),
        F.when(F.col("_next_phase") == "end", F.round("_next_time", 3)).alias("end_s"))
        .withColumn("duration_s", F.round(F.col("end_s") - F.col("start_s"), 3))
        .orderBy("start_s"))


def throughput(ops: DataFrame) -> DataFrame:
    sends = ops.where(F.col("f") == "send").withColumn("second", F.floor("time").cast("long"))
    return (sends.groupBy("second").agg(
        F.sum(F.when(F.col("type") == "ok", 1).otherwise(0)).alias("acked"),
        F.sum(F.when(F.col("type") == "invoke", 1).otherwise(0)).alias("sent"),
        F.sum(F.when(F.col("type").isin("info", "fail"), 1).otherwise(0)).alias("uncertain"))
        .orderBy("second"))


def isr_sizes(ops: DataFrame) -> DataFrame:
    samples = (ops.where(F.col("f") == "isr")
               .select(F.floor("time").cast("long").alias("second"),
                       F.from_json("value", _ISR_SCHEMA).alias("v"))
               .select("second", F.explode("v.partitions").alias("partition", "state")))
    return (samples.groupBy("second").agg(
        F.min(F.size("state.isr")).alias("min_isr"),
        F.max(F.size("state.isr")).alias("max_isr"),
        F.sum(F.when(F.col("state.leader") < 0, 1).otherwise(0)).alias("leaderless"))
        .orderBy("second"))


def outcomes(ops: DataFrame) -> DataFrame:
    return (ops.where(F.col("f").isin("send", "poll", "commit", "assign"))
            .groupBy("process", "f", "type").count().orderBy("process", "f", "type"))


def _chart(path: Path, title: str, tput: list, isr: list, bands: list) -> Path:
    from spark_jobs import report
    plt = report.plt
    with report._PYPLOT:
        fig, ax = plt.subplots(figsize=(11, 4))
        ax.plot([r["second"] for r in tput], [r["acked"] for r in tput], linewidth=1,
                color="tab:blue", label="acknowledged writes / s")
        ax.set_xlabel("seconds since the run started")
        ax.set_ylabel("acknowledged writes / s")
        colours = {"kill": "tab:red", "pause": "tab:orange", "restart": "tab:purple",
                   "isolate": "tab:green", "ring": "tab:olive"}
        for b in bands:
            end = b["end_s"] if b["end_s"] is not None else b["start_s"] + 1
            ax.axvspan(b["start_s"], end, alpha=0.18, color=colours.get(b["fault"], "grey"))
            ax.text(b["start_s"], 1.0, f"{b['fault']} {b['target']}", rotation=90,
                    fontsize="x-small", va="top", transform=ax.get_xaxis_transform())
        if isr:
            ax2 = ax.twinx()
            ax2.step([r["second"] for r in isr], [r["min_isr"] for r in isr], where="post",
                     color="black", linewidth=0.8, label="smallest ISR")
            ax2.set_ylabel("smallest ISR")
            ax2.set_ylim(0, max(r["max_isr"] for r in isr) + 0.5)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        return report._save(fig, path)


def run(spark, ctx) -> JobResult:
    from spark_jobs import report
    result = JobResult("chaos")
    out_dir = ctx.job_dir("chaos")
    for i, history in enumerate(ctx.chaos_histories):
        name = Path(history).parent.name or f"run{i}"
        ops = operations(spark.read.text(str(history))).cache()
        found = {"faults": report.collect(faults(ops)),
                 "throughput": report.collect(throughput(ops)),
                 "isr": report.collect(isr_sizes(ops)),
                 "outcomes": report.collect(outcomes(ops))}
        suffix = f"_{name}" if len(ctx.chaos_histories) > 1 else ""
        for table, collected in found.items():
            result.tables[f"{table}{suffix}"] = collected
        result.show += [f"faults{suffix}", f"outcomes{suffix}"]
        bands = found["faults"].rows()
        result.charts.append(_chart(out_dir / f"chaos{suffix or ''}.png",
                                    f"{name}: acknowledged writes, smallest ISR and faults",
                                    found["throughput"].rows(), found["isr"].rows(), bands))
        result.notes.append(f"{history}: {len(bands)} faults")
    return result
