"""The one place a SparkSession for minibroker's analysis is built.

Owns `get_spark` and `JavaMissing`. It applies the settings found necessary on this
kind of machine (workers must run this interpreter, loopback addresses for local masters, UTC,
Python filter push-down on, quiet logs) and registers the "minibroker-log" data source.

Job code never hard-codes a master: an explicit argument wins, then an already running session
(spark-submit, a notebook), then MASTER, then PYSPARK_SUBMIT_ARGS' --master, then local[*].
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Mapping

__all__ = ["JavaMissing", "get_spark", "find_java", "register_data_source"]

DEFAULT_APP_NAME = "minibroker-analyze"


class JavaMissing(RuntimeError):
    """No Java runtime to start Spark's JVM with."""

    def __init__(self) -> None:
        super().__init__(
            "Spark needs a Java 17+ runtime and none was found on PATH or JAVA_HOME: install "
            "one (e.g. `apt-get install default-jre-headless`) or set JAVA_HOME")


def find_java() -> str | None:
    """The java executable Spark's launcher will use (JAVA_HOME first, as spark-class does)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def _master_from_submit_args() -> str | None:
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    try:
        words = shlex.split(args)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word == "--master" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--master="):
            return word.split("=", 1)[1]
    return None


def _local_cores(master: str) -> int:
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master)
    if not m or m.group(1) is None:
        return 1
    if m.group(1) == "*":
        return os.cpu_count() or 1
    return max(1, int(m.group(1)))


def register_data_source(spark):
    """Register the "minibroker-log" data source with `spark`, once per session. It costs
    1.5 s on two cores (Spark starts a Python process for it), so `minibroker analyze`
    registers it only when a log is too large to decode in the driver (spark_jobs.jobs'
    Context, by spark_jobs.tables.needs_data_source)."""
    if not getattr(spark, "_minibroker_log_registered", False):
        # Imported here so that importing this module never imports pyspark's data source
        # API before the session exists.
        from .datasource import MinibrokerLogDataSource
        spark.dataSource.register(MinibrokerLogDataSource)
        spark._minibroker_log_registered = True
    return spark


def _register(spark, data_source: bool):
    return register_data_source(spark) if data_source else spark


def get_spark(master: str | None = None, app_name: str = DEFAULT_APP_NAME, quiet: bool = True,
              local_dir: str | os.PathLike | None = None,
              conf: Mapping[str, str] | None = None, data_source: bool = True):
    """Return the SparkSession to run jobs in, with the data source registered (unless
    `data_source` is false: then register_data_source does it when needed).

    master: None reuses a running session or follows MASTER / PYSPARK_SUBMIT_ARGS / local[*].
    quiet: hide the console progress bar (it garbles the jobs' stdout).
    local_dir: Spark's scratch directory (spark.local.dir); the warehouse and Derby home go
    under it too, so tests can keep everything in a temporary directory.
    conf: extra Spark settings, applied last (e.g. the fast-test JVM options).

    Raises JavaMissing, before trying to start a JVM, when there is no java to start.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        # spark-submit, pyspark shell or an earlier call: its master and conf stand.
        return _register(active, data_source)

    # spark-submit starts the JVM itself and passes its gateway port; its --master and
    # --conf are already in that JVM's system properties.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if not submitted and find_java() is None:
        raise JavaMissing()

    chosen: str | None
    if master is not None:
        chosen = master
    elif submitted:
        from pyspark import SparkConf
        chosen = SparkConf().get("spark.master", None)
    else:
        chosen = os.environ.get("MASTER") or _master_from_submit_args() or "local[*]"
    is_local = chosen is None or chosen.startswith("local")

    if is_local:
        # Workers start `python3` from PATH otherwise, which lacks pyarrow and our packages.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        # The hostname resolves to a loopback alias here and Spark would pick the NIC's address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    else:
        # On a cluster the executors' interpreter is the cluster's business (spark.pyspark.python).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(app_name)
    if chosen is not None and (master is not None or not submitted):
        builder = builder.master(chosen)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.ui.showConsoleProgress": "false" if quiet else "true",
        "spark.log.level": "WARN",
    }
    if is_local:
        cores = _local_cores(chosen or "local")
        settings.update({
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            # 200 shuffle partitions is sized for clusters; one machine's cores want a few.
            "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
            # The driver JVM only plans and moves rows here: Python workers do the decoding
            # (JVM CPU was 3% of task time on a 1 GB log). C2's compiler threads and G1's
            # concurrent ones would take a core from them, mostly while Spark starts.
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        })
    if local_dir is not None:
        base = Path(local_dir)
        base.mkdir(parents=True, exist_ok=True)
        derby = f"-Dderby.system.home={base / 'derby'}"
        key = "spark.driver.extraJavaOptions"
        settings.update({
            "spark.local.dir": str(base / "spark-local"),
            "spark.sql.warehouse.dir": str(base / "warehouse"),
            key: f"{settings[key]} {derby}" if key in settings else derby,
        })
    if quiet and not submitted:
        # Under spark-submit the JVM is already running with the user's own logging.
        log4j = f"-Dlog4j2.configurationFile={Path(__file__).with_name('log4j2.properties')}"
        key = "spark.driver.extraJavaOptions"
        settings[key] = f"{settings[key]} {log4j}" if key in settings else log4j
    if conf:
        for key, value in conf.items():
            if key == "spark.driver.extraJavaOptions" and key in settings:
                # Both may carry options; the JVM takes one string.
                value = f"{settings[key]} {value}"
            settings[key] = str(value)
    for key, value in settings.items():
        builder = builder.config(key, value)

    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return _register(spark, data_source)
