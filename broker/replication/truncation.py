"""Where a follower truncates its log once the leader has answered OffsetForLeaderEpoch
(KIP-101, KIP-279; Kafka's AbstractFetcherThread.getOffsetTruncationState).

Owns the decision only: the follower asks about `epoch_to_request(cache)`, the leader
answers (its largest epoch <= that one, where it ends), and `truncation_offset` turns the
answer into an offset to truncate to. The caller truncates its log and its cache there
and, when the decision is not complete, asks again about `next_epoch` -- each round asks
about an older epoch, so the rounds end. The cache is truncated
(`LeaderEpochCache.truncate_from_end`) even when the log keeps every batch: an epoch this
replica assigned at its log end when it led, and never wrote in, would otherwise make the
leader's next batch look like an epoch going backwards (Kafka's UnifiedLog.truncateTo).

Why more than one round (KIP-279): the leader's answer is about *its* history. When the
follower never held the epoch the leader names, the two logs may already differ inside
the follower's own older epochs, so the follower cuts back to the end of its largest
epoch below the leader's and asks about that one.

The high watermark is used only when the leader cannot say where any of our epochs end
(an UNDEFINED end offset: its log is empty, or the request was UNDEFINED) -- the pre-KIP-101
rule, which can lose committed messages or keep divergent ones; a fetch beyond the leader's
log end then answers OFFSET_OUT_OF_RANGE and the follower truncates to that end.
"""

from __future__ import annotations

from dataclasses import dataclass

from .leader_epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache


@dataclass(frozen=True, slots=True)
class TruncationDecision:
    offset: int            # truncate the follower log to this offset
    complete: bool         # False: ask again with `next_epoch` (KIP-279 multi-round)
    next_epoch: int = UNDEFINED_EPOCH


def epoch_to_request(cache: LeaderEpochCache) -> int:
    """The epoch a follower asks the leader about: its latest, UNDEFINED_EPOCH when its
    log holds none (an empty log has nothing to truncate)."""
    latest = cache.latest_epoch
    return UNDEFINED_EPOCH if latest is None else latest


def truncation_offset(cache: LeaderEpochCache, log_end_offset: int, high_watermark: int,
                      leader_epoch: int, leader_end_offset: int) -> TruncationDecision:
    """Where to truncate, given the follower's `cache` and log end offset, its high
    watermark, and the leader's answer (`leader_epoch`, `leader_end_offset`). The offset is
    never above `log_end_offset`."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return TruncationDecision(min(high_watermark, log_end_offset), complete=True)
    if leader_epoch == UNDEFINED_EPOCH:
        # a leader that tracks no epochs (OffsetForLeaderEpoch v0) still knows its end
        return TruncationDecision(min(leader_end_offset, log_end_offset), complete=True)
    follower_epoch, follower_end = cache.end_offset_for(leader_epoch, log_end_offset)
    if follower_end == UNDEFINED_EPOCH_OFFSET:
        # we hold no epochs: the leader's epoch is at most the one we asked about, so
        # its end is as far as our log can agree with it
        return TruncationDecision(min(leader_end_offset, log_end_offset), complete=True)
    if follower_epoch != leader_epoch:
        # we never held the leader's epoch; ours below it ends at follower_end, and what
        # lies before may differ too: cut there and ask about our epoch
        return TruncationDecision(min(follower_end, log_end_offset), complete=False,
                                  next_epoch=follower_epoch)
    return TruncationDecision(min(follower_end, leader_end_offset, log_end_offset),
                              complete=True)
