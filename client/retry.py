"""Retrying a request until a deadline: what AdminClient and Consumer calls share.

Owns: `retry_until_deadline`, the loop behind every client call that retries with backoff
until its api timeout (default_api_timeout_ms) and then says what it last saw.
"""

from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

import trio

from client.errors import KafkaError, KafkaTimeoutError

__all__ = ["retry_until_deadline"]

T = TypeVar("T")


def _retriable(error: KafkaError) -> bool:
    return error.retriable


async def retry_until_deadline(
        what: str, attempt: Callable[[], Awaitable[T]], *, budget_ms: int,
        backoff_s: Callable[[int], float],
        should_retry: Callable[[KafkaError], bool] = _retriable,
        on_retry: Callable[[KafkaError], None] | None = None,
        max_retries: int | None = None) -> T:
    """Run `attempt` until it succeeds, raises an error `should_retry` refuses (or one
    after `max_retries` retries), or `budget_ms` has passed: then KafkaTimeoutError naming
    `what` and the last error. Before each retry, `on_retry(error)` (forget a coordinator,
    ask for metadata), then a sleep of `backoff_s(retries so far)`."""
    deadline = trio.current_time() + budget_ms / 1000
    tries = 0
    last: KafkaError | None = None
    while True:
        with trio.move_on_at(deadline):
            try:
                return await attempt()
            except KafkaError as e:
                if not should_retry(e) or (max_retries is not None and tries >= max_retries):
                    raise
                last = e
                if on_retry is not None:
                    on_retry(e)
                await trio.sleep(backoff_s(tries))
                tries += 1
                continue
        detail = f"; last error: {last}" if last is not None else ""
        raise KafkaTimeoutError(f"{what} did not complete within {budget_ms} ms "
                                f"({tries} retries){detail}") from last
