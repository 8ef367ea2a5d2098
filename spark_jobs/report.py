"""What `minibroker analyze` leaves under --out: tables, charts and one HTML page.

Owns
- `Collected` / `collect(df)`: an output table run once into the driver, from which its
  files, the report's head and the job's charts are all taken;
- `write_table(df or Collected, out, job, name, head)`: OUT/<job>/<name>/parquet/ (the
  table as is) and OUT/<job>/<name>/csv/ (one part file with a header; arrays and structs
  as JSON, binary as base64, since CSV holds neither);
- the chart helpers the jobs draw with (matplotlib, Agg backend, PNG under OUT/<job>/):
  `lines`, `lag_charts`, `status_heatmap`, `gantt`, `bars`. The time-based ones take the
  report's `span` (first and last event of the whole report, spark_jobs.jobs.Context
  .time_span): every such chart then counts seconds from the same origin over the same x
  range, and says so in its PNG's "minibroker time axis" text chunk (`time_axis` reads it);
- `write_html(out, results, tables)`: OUT/report.html with every chart, every job's notes,
  text blocks and small tables, and links to every table's CSV and Parquet.
"""

from __future__ import annotations

import functools
import html
import json
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # no display: write files only
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["Collected", "collect", "write_table", "lines", "lag_charts", "status_heatmap", "gantt", "bars",
           "write_html", "SHOW_ROWS", "Span", "time_axis", "TIME_AXIS_KEY"]

SHOW_ROWS = 50           # rows of a small table printed in the HTML page
MAX_SERIES = 12          # lines in one chart before the rest are left out (named in the title)
# (first ms, last ms): the whole report's time range, which every time-based chart shares
Span = tuple[int, int]
TIME_AXIS_KEY = "minibroker time axis"  # the PNG text chunk naming a chart's time axis
STATUS_COLOURS = {0: "#ffffff", 1: "#4caf50", 2: "#ffc107", 3: "#ff9800", 4: "#f44336",
                  5: "#9c27b0", 6: "#2196f3"}


# --- tables ------------------------------------------------------------------------------

def _csv_column(field):
    """The column as the CSV holds it: arrays, structs and maps as JSON, binary as base64."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BinaryType, MapType, StructType
    c = F.col(f"`{field.name}`")
    if isinstance(field.dataType, (ArrayType, StructType, MapType)):
        return F.to_json(c)
    if isinstance(field.dataType, BinaryType):
        return F.base64(c)
    return c


def _csv_schema(schema):
    from pyspark.sql.types import (ArrayType, BinaryType, MapType, StringType, StructField,
                                   StructType)
    return StructType([StructField(f.name, StringType(), f.nullable)
                       if isinstance(f.dataType, (ArrayType, StructType, MapType, BinaryType))
                       else f for f in schema.fields])


def _csv_ready(df):
    return df.select(*[_csv_column(f).alias(f.name) for f in df.schema.fields])


# A table of up to this many rows is collected into the driver and written from there (see
# Collected); a larger one stays in Spark and is written by Spark's writers, three queries.
LOCAL_WRITE_ROWS = 200_000
_CSV_LINE = "__csv_line"
_SHOWN = "__shown_"


class Collected:
    """An output table run once, as one Spark query, and held in the driver.

    The tables are aggregates, small next to the log they come from, and on small data each
    Spark query costs far more than its rows (docs/BENCHMARKS.md). So a job collects a table
    once and everything else is taken from that: write_table's Parquet and CSV, the report's
    head, the job's charts (`pandas`, `rows`), tables filtered from it (`where`) and tables
    derived from it by Spark (`frame`, a local relation, so no plan runs twice and nothing
    needs caching). One collect returns the typed columns, each row's CSV line as Spark's
    CSV writer formats it (`to_csv`: the same generator and defaults) and the columns the
    report prints. A table over LOCAL_WRITE_ROWS rows is not held: `arrow` is None and
    every use runs `df` again, as before."""

    def __init__(self, df, arrow=None, lines=None, shown=None) -> None:
        self.df = df
        self.schema = df.schema
        self.arrow, self.lines, self.shown = arrow, lines, shown

    @classmethod
    def run(cls, df) -> "Collected":
        from pyspark.sql import functions as F

        schema = df.schema
        names = schema.fieldNames()
        csv_cols = [_csv_column(f) for f in schema.fields]
        both = df.select(
            *[F.col(f"`{n}`").alias(f"__col_{i}") for i, n in enumerate(names)],
            F.to_csv(F.struct(*[c.alias(n) for c, n in zip(csv_cols, names)])).alias(_CSV_LINE),
            *[c.alias(f"{_SHOWN}{i}") for i, c in enumerate(csv_cols)])
        table = both.limit(LOCAL_WRITE_ROWS + 1).toArrow()
        if table.num_rows > LOCAL_WRITE_ROWS:
            return cls(df)
        return cls(df, table.select([f"__col_{i}" for i in range(len(names))])
                   .rename_columns(names),
                   table[_CSV_LINE].to_pylist(),
                   table.select([f"{_SHOWN}{i}" for i in range(len(names))])
                   .rename_columns(names))

    @property
    def held(self) -> bool:
        return self.arrow is not None

    def pandas(self, columns: Sequence[str] | None = None):
        """What df.select(*columns).toPandas() returns."""
        if not self.held:
            return (self.df.select(*columns) if columns else self.df).toPandas()
        from pyspark.sql.types import StructType
        names = list(columns or self.schema.fieldNames())
        return _to_pandas(self.arrow.select(names),
                          StructType([self.schema[n] for n in names]), self.df.sparkSession)

    def rows(self) -> list[dict[str, Any]]:
        """The rows as dicts (the values collect() gives for these tables' types)."""
        if not self.held:
            return [r.asDict() for r in self.df.collect()]
        return self.arrow.to_pylist()

    def max(self, column: str):
        """The column's largest value (None when it has none): df.agg(max(column))."""
        if not self.held:
            from pyspark.sql import functions as F
            return self.df.agg(F.max(f"`{column}`")).first()[0]
        import pyarrow.compute as pc
        return pc.max(self.arrow[column]).as_py()

    def frame(self):
        """The table as a Spark DataFrame over the held rows (a local relation)."""
        if not self.held:
            return self.df
        return self.df.sparkSession.createDataFrame(self.arrow, self.schema)

    def where(self, column: str) -> "Collected":
        """The rows whose boolean `column` is true, in order: df.where(column)."""
        if not self.held:
            return Collected(self.df.where(f"`{column}`"))
        import pyarrow.compute as pc
        keep = pc.fill_null(self.arrow[column], False)
        picked = [line for line, k in zip(self.lines, keep.to_pylist()) if k]
        return Collected(self.df.where(f"`{column}`"), self.arrow.filter(keep), picked,
                         self.shown.filter(keep))


def collect(df) -> Collected:
    """Run `df` once into the driver (see Collected)."""
    return df if isinstance(df, Collected) else Collected.run(df)


def write_table(table, out: str | os.PathLike, job: str, name: str,
                head: bool = True) -> dict[str, Any]:
    """Write one table (a DataFrame, or a Collected) both ways: Parquet and a CSV with a
    header; return {"rows", "parquet", "csv", "head" (pandas, or None when `head` is false:
    only the tables the report prints need one)}. A DataFrame is collected first (one Spark
    query); the files are then written here by pyarrow, with no further Spark job."""
    base = Path(out) / job / name
    table = collect(table)
    if not table.held:
        return _write_with_spark(table.df, base, head)
    schema = table.schema
    _write_parquet(table.arrow, schema, base / "parquet")
    _write_csv(schema.fieldNames(), table.lines, base / "csv")
    shown = (_to_pandas(table.shown.slice(0, SHOW_ROWS), _csv_schema(schema),
                        table.df.sparkSession) if head else None)
    return {"rows": table.arrow.num_rows, "parquet": base / "parquet", "csv": base / "csv",
            "head": shown}


def _write_parquet(table, schema, path: Path) -> None:
    """One part file as Spark names them, and the _SUCCESS marker; the footer carries the
    Spark schema as Spark's own writer stores it, so Spark reads back the same types."""
    import json

    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    _fresh(path)
    # jsonValue's key order is the JVM's (StructType.json() would sort the keys)
    spark_schema = json.dumps(schema.jsonValue(), separators=(",", ":"))
    arrow_schema = to_arrow_schema(schema, timezone="UTC").with_metadata(
        {"org.apache.spark.sql.parquet.row.metadata": spark_schema})
    pq.write_table(table.cast(arrow_schema), str(path / "part-00000-c000.snappy.parquet"),
                   compression="snappy")
    (path / "_SUCCESS").touch()


def _write_csv(columns: list[str], lines: list[str], path: Path) -> None:
    _fresh(path)
    header = ",".join(_csv_header_field(c) for c in columns)
    with open(path / "part-00000-c000.csv", "w", encoding="utf-8", newline="") as f:
        f.write(header + "\n")
        for line in lines:
            f.write(line + "\n")
    (path / "_SUCCESS").touch()


def _csv_header_field(name: str) -> str:
    # Spark's CSV defaults: quote with ", escape with \, quote only when needed
    if any(ch in name for ch in ',"\\\n\r') or name != name.strip():
        return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return name


def _fresh(path: Path) -> None:
    import shutil
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def _to_pandas(table, schema, spark):
    """What DataFrame.toPandas() returns for these rows, converted as it converts them."""
    import pandas as pd
    from pyspark.sql.pandas.conversion import _convert_arrow_table_to_pandas
    from pyspark.sql.pandas.types import _create_converter_to_pandas

    arrow_on, struct_mode = spark._jconf.getConfs(
        ["spark.sql.execution.arrow.pyspark.enabled",
         "spark.sql.execution.pandas.structHandlingMode"])
    if arrow_on == "true":
        return _convert_arrow_table_to_pandas(table, schema, timezone="UTC",
                                              struct_handling_mode=struct_mode,
                                              date_as_object=True)
    rows = [tuple(r.values()) for r in table.to_pylist()]
    pdf = (pd.DataFrame.from_records(rows, index=range(len(rows)), columns=schema.names)
           if rows else pd.DataFrame(columns=schema.names))
    if not schema.fields:
        return pdf
    return pd.concat([_create_converter_to_pandas(
        f.dataType, f.nullable, timezone="UTC",
        struct_in_pandas="row" if struct_mode == "legacy" else struct_mode,
        error_on_duplicated_field_names=False, timestamp_utc_localized=False)(pser)
        for (_, pser), f in zip(pdf.items(), schema.fields)], axis="columns")


def _write_with_spark(df, base: Path, head: bool) -> dict[str, Any]:
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    counted = Observation(f"{base.parent.name}/{base.name}")
    df.observe(counted, F.count(F.lit(1)).alias("rows")).write.mode("overwrite") \
        .parquet(str(base / "parquet"))
    rows = counted.get["rows"]
    written = df.sparkSession.read.schema(df.schema).parquet(str(base / "parquet"))
    _csv_ready(written).coalesce(1).write.mode("overwrite").option("header", True) \
        .csv(str(base / "csv"))
    shown = _csv_ready(written.limit(SHOW_ROWS)).toPandas() if head else None
    return {"rows": rows, "parquet": base / "parquet", "csv": base / "csv", "head": shown}


# --- charts ------------------------------------------------------------------------------

# pyplot keeps one global figure state, and jobs may draw from threads side by side
_PYPLOT = threading.RLock()


def _one_at_a_time(draw):
    @functools.wraps(draw)
    def locked(*args, **kwargs):
        with _PYPLOT:
            return draw(*args, **kwargs)
    return locked


def _save(fig, path: Path, time_axis: Mapping[str, Any] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    metadata = {TIME_AXIS_KEY: json.dumps(time_axis)} if time_axis is not None else None
    fig.savefig(path, dpi=90, metadata=metadata)
    plt.close(fig)
    return path


def time_axis(path: str | os.PathLike) -> dict[str, Any] | None:
    """What a time-based chart says of its x axis: {"t0_ms", "span", "xlim"} (None for a
    chart without one): the origin its seconds count from, the report's span it was drawn
    over, and the x range drawn."""
    from PIL import Image
    with Image.open(path) as image:
        text = getattr(image, "text", {}).get(TIME_AXIS_KEY)
    return json.loads(text) if text else None


def _origin(span: Span | None, times: Iterable[int]) -> int:
    """Where a chart's seconds count from: the report's first event, or without a span
    (a chart drawn on its own) its own earliest time."""
    if span is not None:
        return span[0]
    return min(times, default=0)


def _set_time_axis(ax, t0_ms: int, span: Span | None) -> dict[str, Any]:
    """The x label, and with a span the x range: the whole report's, the same on every
    chart, so that a moment sits at the same x in each of them."""
    ax.set_xlabel(f"seconds since {_iso(t0_ms)}")
    if span is not None:
        width = (span[1] - span[0]) / 1000
        margin = max(width * 0.01, 0.05)
        ax.set_xlim(-margin, width + margin)
    lo, hi = ax.get_xlim()
    return {"t0_ms": int(t0_ms), "span": list(span) if span is not None else None,
            "xlim": [float(lo), float(hi)]}


def _shade(ax, t0_ms: int, spans: Iterable[tuple[int, int, str]]) -> list[Any]:
    """Shaded stretches of time (start ms, end ms, label), e.g. the cluster stopping; one
    legend entry per label."""
    from matplotlib.patches import Patch
    handles, seen = [], set()
    for start, end, label in spans:
        ax.axvspan((start - t0_ms) / 1000, (end - t0_ms) / 1000, color="grey", alpha=0.15,
                   linewidth=0)
        if label not in seen:
            seen.add(label)
            handles.append(Patch(color="grey", alpha=0.15, label=label))
    return handles


@_one_at_a_time
def lines(path: Path, series: Mapping[str, tuple[Sequence, Sequence]], title: str,
          ylabel: str, t0_ms: int | None = None, markers: Iterable[tuple[int, str]] = (),
          step: bool = False, span: Span | None = None, bucket_ms: int | None = None,
          shaded: Iterable[tuple[int, int, str]] = (), zero_based: bool = False) -> Path:
    """One line per series, x in seconds since t0_ms (default: the span's start, else the
    earliest x), vertical dashed markers at (ms, label), shaded stretches (start, end,
    label); `zero_based`: a count, its y axis from 0 (and to 1 at least). With `bucket_ms`
    each x is the start of a bucket that long and its value holds over the bucket: drawn
    as steps to the last bucket's end (a minute's percentile at the minute's start alone
    would fall before a report that began mid-minute)."""
    xs_all = [x for xs, _ in series.values() for x in xs]
    markers = list(markers)
    if t0_ms is None:
        t0_ms = _origin(span, xs_all + [m for m, _ in markers])
    fig, ax = plt.subplots(figsize=(10, 4))
    names = list(series)
    for name in names[:MAX_SERIES]:
        xs, ys = list(series[name][0]), list(series[name][1])
        if bucket_ms is not None and xs:
            xs, ys = xs + [xs[-1] + bucket_ms], ys + [ys[-1]]
        x = [(v - t0_ms) / 1000 for v in xs]
        if step or bucket_ms is not None:
            ax.step(x, ys, where="post", label=name, linewidth=1)
        else:
            ax.plot(x, ys, label=name, linewidth=1)
    for i, (m, _label) in enumerate(markers):
        ax.axvline((m - t0_ms) / 1000, color="grey", linestyle="--", linewidth=0.7,
                   label="rebalance" if i == 0 else None)
    extra = _shade(ax, t0_ms, shaded)
    if len(names) > MAX_SERIES:
        title += f" (first {MAX_SERIES} of {len(names)})"
    ax.set_title(title)
    axis = _set_time_axis(ax, t0_ms, span)
    ax.set_ylabel(ylabel)
    if zero_based:
        top = max([y for _, ys in series.values() for y in ys], default=0)
        ax.set_ylim(0, max(1, top) * 1.05)
    if names or markers or extra:
        handles, _ = ax.get_legend_handles_labels()
        ax.legend(handles=handles + extra, fontsize="x-small", loc="upper right")
    ax.grid(alpha=0.3)
    return _save(fig, path, axis)


def _iso(ms: int) -> str:
    from spark_jobs.jobs import ms_to_text
    return ms_to_text(int(ms))


@_one_at_a_time
def lag_charts(pdf, out_dir: Path, span: Span | None = None) -> list[Path]:
    """Lag in records and seconds over time, one line per group/topic-partition."""
    if pdf.empty:
        return []
    charts = []
    key = pdf["group"] + " " + pdf["topic"] + "-" + pdf["partition"].astype(str)
    pdf = pdf.assign(key=key).sort_values("ts")
    worst = pdf.groupby("key")["lag_records"].max().sort_values(ascending=False).index
    # split once (rows stay in ts order), not one scan of the whole history per key
    by_key = dict(tuple(pdf.groupby("key", sort=False)))
    for column, label, name in (("lag_records", "records", "lag_records.png"),
                                ("lag_seconds", "seconds", "lag_seconds.png")):
        series = {k: (by_key[k]["ts"].tolist(), by_key[k][column].tolist()) for k in worst}
        charts.append(lines(out_dir / name, series, f"consumer lag ({label}) at each commit",
                            label, step=True, span=span))
    return charts


@_one_at_a_time
def status_heatmap(pdf, out_dir: Path, codes: Mapping[str, int], columns: int = 120,
                   span: Span | None = None) -> list[Path]:
    """Partition x time, the worst Burrow status in each time bucket (the buckets start at
    the first evaluation; the axis is the report's span when given)."""
    if pdf.empty:
        return []
    from matplotlib.colors import ListedColormap
    import numpy as np
    t0, t1 = int(pdf["ts"].min()), int(pdf["ts"].max())
    origin = _origin(span, [t0])
    width = max(1, (t1 - t0) // columns + 1)
    pdf = pdf.assign(key=pdf["group"] + " " + pdf["topic"] + "-" + pdf["partition"].astype(str),
                     bucket=(pdf["ts"] - t0) // width)
    grid = pdf.pivot_table(index="key", columns="bucket", values="status_code", aggfunc="max")
    grid = grid.reindex(columns=range(int(pdf["bucket"].max()) + 1)).ffill(axis=1).fillna(0)
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.22 * len(grid) + 1.2)))
    cmap = ListedColormap([STATUS_COLOURS[i] for i in range(7)])
    ax.imshow(np.asarray(grid.values, dtype=float), aspect="auto", cmap=cmap, vmin=-0.5,
              vmax=6.5, interpolation="nearest",
              extent=((t0 - origin) / 1000, (t0 - origin + grid.shape[1] * width) / 1000,
                      len(grid), 0))
    ax.set_yticks([i + 0.5 for i in range(len(grid))])
    ax.set_yticklabels(grid.index, fontsize="x-small")
    axis = _set_time_axis(ax, origin, span)
    ax.set_title("Burrow partition status over time")
    from matplotlib.patches import Patch
    names = {v: k for k, v in codes.items()}
    ax.legend(handles=[Patch(color=STATUS_COLOURS[c], label=names[c]) for c in range(1, 7)],
              fontsize="x-small", loc="upper right", ncol=6)
    return [_save(fig, out_dir / "status_heatmap.png", axis)]


@_one_at_a_time
def gantt(path: Path, rows: Sequence[tuple[str, int, int, str]], title: str,
          t0_ms: int | None = None, points: Sequence[tuple[str, int, str]] = (),
          span: Span | None = None, lanes: Sequence[str] = (),
          colours: Mapping[str, str] | None = None,
          shaded: Iterable[tuple[int, int, str]] = ()) -> Path:
    """Horizontal bars: (lane, start_ms, end_ms, colour group) per bar; `lanes` come first
    in their order, then the others sorted; `colours` fixes a group's colour (the rest take
    the palette's); `points` (lane, ms, kind) are instants drawn as black ticks on their
    lane, one marker shape per kind; `shaded` (start, end, label) are stretches of time
    shaded across every lane."""
    shaded = list(shaded)
    named = list(dict.fromkeys(lanes))
    order = named + sorted(({r[0] for r in rows} | {p[0] for p in points}) - set(named))
    if t0_ms is None:
        t0_ms = _origin(span, [r[1] for r in rows] + [p[1] for p in points]
                        + [s[0] for s in shaded])
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.3 * len(order) + 1.2)))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    kinds = sorted({r[3] for r in rows})
    free = [k for k in kinds if k not in (colours or {})]
    colour = {k: palette[i % len(palette)] for i, k in enumerate(free)} | dict(colours or {})
    for lane, start, end, kind in rows:
        ax.barh(order.index(lane), max(end - start, 1) / 1000, left=(start - t0_ms) / 1000,
                height=0.6, color=colour[kind])
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles: list[Any] = ([Patch(color=colour[k], label=k) for k in kinds]
                          if len(kinds) > 1 or points or shaded else [])
    shapes = "v^dsx+"
    for i, kind in enumerate(sorted({p[2] for p in points})):
        at = [p for p in points if p[2] == kind]
        ax.scatter([(ms - t0_ms) / 1000 for _, ms, _ in at],
                   [order.index(lane) for lane, _, _ in at],
                   marker=shapes[i % len(shapes)], color="black", s=18, zorder=3)
        handles.append(Line2D([], [], marker=shapes[i % len(shapes)], color="black",
                              linestyle="", label=kind))
    handles += _shade(ax, t0_ms, shaded)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels(order, fontsize="x-small")
    ax.set_ylim(len(order) - 0.5, -0.5)  # the first lane on top
    axis = _set_time_axis(ax, t0_ms, span)
    ax.set_title(title)
    if handles and (points or shaded):
        # beside the plot: ticks would hide under it
        ax.legend(handles=handles, fontsize="x-small", loc="upper left",
                  bbox_to_anchor=(1.01, 1))
    elif handles:
        ax.legend(handles=handles, fontsize="x-small")
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path, axis)


@_one_at_a_time
def bars(path: Path, labels: Sequence[str], values: Sequence[float], title: str, ylabel: str,
         hlines: Iterable[tuple[float, str]] = (), highlight: Sequence[bool] | None = None
         ) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4))
    colours = ["#f44336" if h else "#1f77b4" for h in (highlight or [False] * len(values))]
    ax.bar(range(len(values)), values, color=colours)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=90 if len(labels) > 12 else 0, fontsize="x-small")
    for y, label in hlines:
        ax.axhline(y, color="grey", linestyle="--", linewidth=0.8, label=label)
    if hlines:
        ax.legend(fontsize="x-small")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


# --- HTML --------------------------------------------------------------------------------

_STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;font-size:12px;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}th{background:#eee}
pre{background:#f6f6f6;padding:.6em;overflow:auto}img{max-width:100%;border:1px solid #ddd}
.OK{background:#c8e6c9}.WARN{background:#fff59d}.ERR{background:#ffcc80}
.STOP{background:#ef9a9a}.STALL{background:#e1bee7}.REWIND{background:#bbdefb}"""


def _html_table(pdf) -> str:
    cols = list(pdf.columns)
    out = ["<table><tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in cols) + "</tr>"]
    for _, row in pdf.iterrows():
        cells = []
        for c in cols:
            v = row[c]
            text = "" if v is None or (isinstance(v, float) and v != v) else str(v)
            cls = f' class="{text}"' if c == "status" else ""
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(out) + "</table>"


def write_html(out: str | os.PathLike, results: Sequence[Any],
               written: Mapping[str, Mapping[str, Mapping[str, Any]]],
               title: str = "minibroker analysis", preamble: Sequence[str] = ()) -> Path:
    """OUT/report.html. `written[job][table]` is what write_table returned."""
    out = Path(out)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    parts += [f"<p>{html.escape(p)}</p>" for p in preamble]
    parts.append("<ul>" + "".join(f"<li><a href='#{r.name}'>{r.name}</a></li>" for r in results)
                 + "</ul>")
    for r in results:
        parts.append(f"<h2 id='{r.name}'>{r.name}</h2>")
        parts += [f"<p>{html.escape(n)}</p>" for n in r.notes]
        for chart in r.charts:
            rel = os.path.relpath(chart, out)
            parts.append(f"<p><a href='{rel}'><img src='{rel}' alt='{html.escape(rel)}'></a></p>")
        for heading, text in r.texts.items():
            parts.append(f"<h3>{html.escape(heading)}</h3><pre>{html.escape(text)}</pre>")
        tables = written.get(r.name, {})
        for name in r.show:
            if name in tables:
                info = tables[name]
                more = (f" (first {SHOW_ROWS} of {info['rows']})"
                        if info["rows"] > SHOW_ROWS else "")
                parts.append(f"<h3>{html.escape(name)}{more}</h3>")
                parts.append(_html_table(info["head"]) if info["rows"] else "<p>(no rows)</p>")
        if tables:
            parts.append("<h3>tables</h3><ul>")
            for name, info in tables.items():
                csv = os.path.relpath(info["csv"], out)
                pq = os.path.relpath(info["parquet"], out)
                parts.append(f"<li>{html.escape(name)}: {info['rows']} rows, "
                             f"<a href='{csv}'>CSV</a>, <a href='{pq}'>Parquet</a></li>")
            parts.append("</ul>")
    parts.append("</body></html>")
    path = out / "report.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
