"""spark_jobs.session's checks that run before any JVM starts."""

from __future__ import annotations

import os

import pytest

from spark_jobs.session import JavaMissing, _master_from_submit_args, find_java, get_spark


def test_no_java_raises_java_missing_before_starting_a_jvm(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a directory without java
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert find_java() is None
    # an explicit master skips reusing a session the other tests may have running
    with pytest.raises(JavaMissing) as caught:
        get_spark(master="local[1]")
    message = str(caught.value)
    assert isinstance(caught.value, RuntimeError)
    assert "\n" not in message and "Java 17" in message
    assert "apt-get install default-jre-headless" in message and "JAVA_HOME" in message


def test_java_home_is_looked_at_first(monkeypatch, tmp_path):
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", os.defpath)
    assert find_java() == str(java)


@pytest.mark.parametrize("args, master", [
    ("--master local[3] pyspark-shell", "local[3]"),
    ("--conf a=b --master=spark://h:7077 pyspark-shell", "spark://h:7077"),
    ("pyspark-shell", None),
    ("", None),
])
def test_master_from_pyspark_submit_args(monkeypatch, args, master):
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", args)
    assert _master_from_submit_args() == master
