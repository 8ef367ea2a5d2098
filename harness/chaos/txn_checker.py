"""Jepsen's transactional checkers, over the transactional workload's history and final
reads (harness.chaos.txn_workload).

Owns: `check_transactions`, which judges what a read_committed reader finally sees of the
sink topic (`committed`), beside everything in it (`everything`, read_uncommitted), the
copiers' group's committed offsets and the source topic's records:

- aborted-read: a committed output of a transaction recorded as aborted (fail);
- lost-committed-write: an output of a transaction recorded as committed (ok) that is not
  among the committed outputs;
- torn-transaction: a transaction some of whose outputs are committed and others not;
- duplicate-output: a source record copied to the committed output more than once (the
  exactly-once promise);
- offsets-inconsistent: the group's committed offset of a source partition disagrees
  with the committed output: every source record below it must have been copied (once,
  checked above, and with its value), and none at or above it.

A transaction whose outcome the client could not know (info, or no answer) may have gone
either way: it is judged only by the all-or-nothing and exactly-once rules.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from harness.chaos.history import FAIL, INFO, INVOKE, OK
from harness.chaos.txn_workload import parse_output

TXN_FAILURES = ("aborted-read", "lost-committed-write", "torn-transaction",
                "duplicate-output", "offsets-inconsistent")
EXAMPLES = 5


def check_transactions(ops: list[dict[str, Any]], committed: list[str], everything: list[str],
                       group_offsets: dict[int, int],
                       source: dict[int, dict[int, str]]) -> dict[str, list[str]]:
    """Violations by checker name (only those that found some), a few examples each.
    `source` is partition -> offset -> value of the source topic."""
    outputs: dict[str, list[str]] = {}
    status: dict[str, str] = {}
    for op in ops:
        if op["f"] != "txn":
            continue
        tag = op["value"]["tag"]
        if op["type"] == INVOKE:
            outputs[tag] = list(op["value"]["outputs"])
            status.setdefault(tag, INFO)
        elif op["type"] in (OK, FAIL, INFO):
            status[tag] = op["type"]
    found: dict[str, list[str]] = defaultdict(list)

    def note(name: str, text: str) -> None:
        if len(found[name]) < EXAMPLES:
            found[name].append(text)

    seen = Counter(committed)
    by_tag: dict[str, set[str]] = defaultdict(set)
    inputs: Counter[tuple[int, int]] = Counter()
    for text in committed:
        tag, partition, offset, value = parse_output(text)
        by_tag[tag].add(text)
        inputs[(partition, offset)] += 1
        if status.get(tag) == FAIL:
            note("aborted-read", f"{text!r} of aborted transaction {tag}")
        expected = source.get(partition, {}).get(offset)
        if expected is not None and expected != value:
            note("offsets-inconsistent", f"{text!r}: source {partition}:{offset} is "
                                         f"{expected!r}")
    for tag, wanted in outputs.items():
        got = by_tag.get(tag, set())
        if status.get(tag) == OK and got != set(wanted):
            missing = sorted(set(wanted) - got)
            note("lost-committed-write", f"transaction {tag}: {len(missing)} of "
                                         f"{len(wanted)} outputs missing, e.g. {missing[0]!r}")
        elif got and got != set(wanted):
            note("torn-transaction", f"transaction {tag} ({status.get(tag)}): "
                                     f"{len(got)} of {len(wanted)} outputs committed")
    for text, n in seen.items():
        if n > 1:
            note("duplicate-output", f"{text!r} committed {n} times")
    for (partition, offset), n in sorted(inputs.items()):
        if n > 1:
            note("duplicate-output", f"source {partition}:{offset} copied {n} times")
    for partition, values in sorted(source.items()):
        upto = group_offsets.get(partition, 0)
        copied = {o for (p, o) in inputs if p == partition}
        uncopied = sorted(o for o in values if o < upto and o not in copied)
        beyond = sorted(o for o in copied if o >= upto)
        if uncopied:
            note("offsets-inconsistent", f"partition {partition}: committed offset {upto}, "
                                         f"but {len(uncopied)} records below it not copied, "
                                         f"e.g. {uncopied[0]}")
        if beyond:
            note("offsets-inconsistent", f"partition {partition}: committed offset {upto}, "
                                         f"but {len(beyond)} records at or past it copied, "
                                         f"e.g. {beyond[0]}")
    # outputs a read_committed reader saw that are not in the log at all would be a
    # reader bug; everything committed must be among everything written
    stray = set(committed) - set(everything)
    for text in sorted(stray)[:EXAMPLES]:
        note("aborted-read", f"{text!r} read committed but not in the log")
    return {name: examples for name, examples in found.items() if examples}


def summary(ops: list[dict[str, Any]]) -> dict[str, int]:
    """Transactions by outcome: committed, aborted, unknown."""
    last: dict[str, str] = {}
    for op in ops:
        if op["f"] == "txn":
            last[op["value"]["tag"]] = op["type"]
    counts = Counter(last.values())
    return {"committed": counts[OK], "aborted": counts[FAIL],
            "unknown": counts[INFO] + counts[INVOKE]}


def check_final(ops: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """`check_transactions` over a history holding the final reads: the source's
    (process "final", f "read", as both harnesses record them) and the sink's
    (f "txn-read", harness.chaos.txn_workload.final_txn_read)."""
    final = next((op["value"] for op in ops if op["f"] == "txn-read"), None)
    if final is None:
        return {"harness-error": ["the sink was not read in time"]}
    source = {op["value"]["partition"]: {o: v for o, v in op["value"]["records"]}
              for op in ops if op["f"] == "read" and op["process"] == "final"}
    offsets = {int(p): o for p, o in final["offsets"].items()}
    found: dict[str, list[Any]] = dict(check_transactions(
        ops, final["committed"], final["everything"], offsets, source))
    unparsed = [v for v in final["everything"] if "|" not in v]
    if unparsed:
        found["harness-error"] = [f"sink values not of the copiers: {unparsed[:3]}"]
    return found
