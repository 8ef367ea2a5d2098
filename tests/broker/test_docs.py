"""The documentation names every property, API and event the code has."""

from __future__ import annotations

from pathlib import Path

from broker.config import BROKER_PROPERTIES, TOPIC_PROPERTIES
from broker.events import EVENT_TYPES
from protocol.messages import APIS

ROOT = Path(__file__).resolve().parents[2]


def test_broker_doc_lists_every_property_api_and_event():
    doc = (ROOT / "docs" / "BROKER.md").read_text()
    missing = [f"property {p}" for p in BROKER_PROPERTIES if f"`{p}`" not in doc]
    missing += [f"topic property {p}" for p in TOPIC_PROPERTIES if f"`{p}`" not in doc]
    missing += [f"api {a.name} ({k})" for k, a in APIS.items() if f"{a.name} ({k})" not in doc]
    missing += [f"event {t}" for t in EVENT_TYPES if f"`{t}`" not in doc]
    assert missing == []


def test_readme_opens_with_the_two_setup_commands():
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```sh", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [
        ["make", "run"], ["make", "test"]]
