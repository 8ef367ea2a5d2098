"""Partition assignors for the classic consumer group protocol (pure, no I/O).

Owns: the registry of built-in assignors by protocol name, turning a
``partition_assignment_strategy`` list into assignor instances, and choosing the rebalance
protocol those assignors allow. The interface and domain types live in ``base``; write
your own assignor by subclassing ``Assignor`` (worked example in base.py's docstring).

Built-in names (docs/PROTOCOL.md §5): "range", "roundrobin", "sticky", "cooperative-sticky".
"""

from __future__ import annotations

from typing import Iterable

from client.consumer.assignors.base import (
    COOPERATIVE, DEFAULT_GENERATION, EAGER, REBALANCE_PROTOCOLS, Assignor, MemberSubscription,
    TopicPartition, eligible_partitions, empty_assignment, format_assignment,
    member_from_subscription, member_sort_key, sorted_member_ids,
)
from client.consumer.assignors.cooperative_sticky import CooperativeStickyAssignor
from client.consumer.assignors.range import RangeAssignor
from client.consumer.assignors.roundrobin import RoundRobinAssignor
from client.consumer.assignors.sticky import StickyAssignor

BUILTIN_ASSIGNORS: dict[str, type[Assignor]] = {
    cls.name: cls
    for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def resolve_assignors(strategy: Iterable[str | Assignor | type[Assignor]]) -> list[Assignor]:
    """Instances for a partition_assignment_strategy list, in preference order.

    Each entry is a built-in name, an Assignor subclass or an Assignor instance. Raises
    ValueError for an unknown name, an empty list, a repeated protocol name or an assignor
    whose supported_protocols names no known protocol, TypeError for anything else.
    """
    if isinstance(strategy, (str, bytes)) or isinstance(strategy, Assignor):
        strategy = [strategy]
    resolved: list[Assignor] = []
    for entry in strategy:
        if isinstance(entry, str):
            if entry not in BUILTIN_ASSIGNORS:
                raise ValueError(f"unknown partition assignor {entry!r}; built-in ones are "
                                 f"{sorted(BUILTIN_ASSIGNORS)}")
            assignor = BUILTIN_ASSIGNORS[entry]()
        elif isinstance(entry, type) and issubclass(entry, Assignor):
            assignor = entry()
        elif isinstance(entry, Assignor):
            assignor = entry
        else:
            raise TypeError(f"partition_assignment_strategy entries are names, Assignor "
                            f"subclasses or instances, not {entry!r}")
        name = getattr(assignor, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{type(assignor).__name__} has no protocol name")
        if not set(assignor.supported_protocols) & set(REBALANCE_PROTOCOLS):
            raise ValueError(f"{name}: supported_protocols {assignor.supported_protocols!r} "
                             f"names none of {REBALANCE_PROTOCOLS}")
        if any(a.name == name for a in resolved):
            raise ValueError(f"partition assignor {name!r} listed twice")
        resolved.append(assignor)
    if not resolved:
        raise ValueError("partition_assignment_strategy is empty")
    return resolved


def rebalance_protocol(assignors: Iterable[Assignor]) -> str:
    """The protocol every assignor supports, preferring cooperative (Java's rule).

    >>> rebalance_protocol([CooperativeStickyAssignor()])
    'cooperative'
    >>> rebalance_protocol([CooperativeStickyAssignor(), RangeAssignor()])
    'eager'
    """
    common = set(REBALANCE_PROTOCOLS)
    for assignor in assignors:
        common &= set(assignor.supported_protocols)
    if not common:
        raise ValueError("the configured assignors share no rebalance protocol")
    return max(common, key=REBALANCE_PROTOCOLS.index)


__all__ = [
    "BUILTIN_ASSIGNORS", "COOPERATIVE", "DEFAULT_GENERATION", "EAGER", "REBALANCE_PROTOCOLS",
    "Assignor", "CooperativeStickyAssignor", "MemberSubscription", "RangeAssignor",
    "RoundRobinAssignor", "StickyAssignor", "TopicPartition", "eligible_partitions",
    "empty_assignment", "format_assignment", "member_from_subscription", "member_sort_key",
    "rebalance_protocol", "resolve_assignors", "sorted_member_ids",
]
