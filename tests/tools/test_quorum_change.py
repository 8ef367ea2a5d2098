"""`metadata-quorum add-controller` / `remove-controller` argument handling: directory ids in
Kafka's base64 form, the new controller read from its properties file (node.id, log.dirs'
meta.properties, its CONTROLLER listener), and one-line refusals of what cannot be used."""

from __future__ import annotations

import argparse
import uuid

import pytest

from cli.main import main
from tools.quorum_change import (controller_from_properties, format_directory_id,
                                 parse_directory_id)


def test_directory_ids_round_trip_in_kafkas_base64_form():
    d = uuid.UUID("5f6d8e2a-1c3b-4a5d-9e7f-0123456789ab")
    assert parse_directory_id(format_directory_id(d)) == d
    assert parse_directory_id(str(d)) == d
    assert format_directory_id(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    with pytest.raises(argparse.ArgumentTypeError):
        parse_directory_id("not-an-id")


def test_the_new_controller_comes_from_its_properties_file(tmp_path):
    data = tmp_path / "d3"
    data.mkdir()
    d = uuid.UUID(int=12345)
    (data / "meta.properties").write_text(f"node.id=3\ndirectory.id={format_directory_id(d)}\n")
    props = tmp_path / "c.properties"
    props.write_text(f"node.id=3\nlog.dirs={data}\ncontroller.listener.names=CONTROLLER\n"
                     "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9193\n")
    assert controller_from_properties(props) == (3, d, ("CONTROLLER", "127.0.0.1", 9193))
    (data / "meta.properties").write_text("node.id=3\n")  # never started
    with pytest.raises(ValueError, match="no directory.id"):
        controller_from_properties(props)
    props.write_text(f"node.id=3\nlog.dirs={tmp_path / 'missing'}\n")
    with pytest.raises(ValueError, match="cannot read"):
        controller_from_properties(props)


def test_a_missing_file_or_incomplete_options_are_one_line(tmp_path, capsys):
    assert main(["metadata-quorum", "--bootstrap-server", "127.0.0.1:1", "add-controller",
                 "--command-config", str(tmp_path / "nope.properties")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read" in err
    assert main(["metadata-quorum", "--bootstrap-server", "127.0.0.1:1", "add-controller",
                 "--controller-id", "3"]) == 1
    assert "add-controller needs" in capsys.readouterr().err
