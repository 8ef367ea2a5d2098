"""Fixtures for the Spark readers' tests.

`spark`: ONE SparkSession for the whole test session, built by spark_jobs.session.get_spark
with SPARK.md's fast-test settings (local[2], no UI, 2 shuffle partitions, a JVM tuned for
short runs, all scratch space under pytest's tmp dir). The JVM's cold start costs ~10 s, so
tests share it and stay tiny.
"""

from __future__ import annotations

import pytest

from spark_jobs.session import get_spark

FAST_TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    # Short-lived test JVMs: the serial collector and C1 only start and warm up fastest.
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    session = get_spark(master="local[2]", app_name="minibroker-tests",
                        local_dir=tmp_path_factory.mktemp("spark"), conf=FAST_TEST_CONF)
    yield session
    session.stop()
