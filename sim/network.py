"""The simulated network: every connection between the simulation's nodes and clients.

Owns `Network`: who listens where (`listen`, as `broker.server.serve` binds), how a
connection is opened (`dial`, as a node's peer channels and the client library open one),
and the faults a seed asks for: a link cut one way or both (`cut`, `heal`), a node cut off
from everyone (`isolate`), a node's connections reset (`reset`), a node paused (its bytes
held both ways), and a node gone (`down`: its listeners close and its connections break,
as after kill -9).

The model is TCP's, as seen by a program: bytes within one connection arrive in order and
never twice; each link (a pair of endpoints, one way) has a latency drawn from the seed,
plus a little jitter per write; bytes written across a cut link are held, as TCP would
retransmit them, and delivered once it heals (the program sees a slow peer and its own
request timeouts fire); a connect across a cut waits like a SYN that gets no answer, up to
CONNECT_TIMEOUT_S, then fails; a connect to an address nobody listens on fails at once
(ECONNREFUSED). Everything waits on the run's clock (a MockClock): nothing here sleeps in
real time.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import math
import random
from collections import deque
from dataclasses import dataclass, field

import trio
from trio._core import _run as trio_run  # the run loop's heap of deadlines

from broker import timeouts

CONNECT_TIMEOUT_S = 3.0  # what a dial across a cut waits before it fails (a SYN unanswered)
# per-link one-way latency (drawn once per link) and per-write jitter, in seconds
LATENCY_S = (0.0002, 0.002)
JITTER_S = 0.0005


class _Pipe:
    """One direction of one connection: writes queued with their delivery time.

    A reader with nothing due parks (no event, no cancel scope of its own) and is woken
    by the network's delivery timer when its first write falls due, or at once by anything
    that changes what it may read (a write to an empty pipe, a close, a reset, the
    topology): one wake-up per delivery, where a timeout per read cost a cancel scope and
    a cancellation each."""

    __slots__ = ("net", "src", "dst", "queue", "last_at", "eof", "broken", "reader_closed",
                 "reader", "due")

    def __init__(self, net: Network, src: str, dst: str) -> None:
        self.net, self.src, self.dst = net, src, dst
        self.queue: deque[tuple[float, bytes]] = deque()
        self.last_at = 0.0
        self.eof = False  # the writer closed: the reader sees b"" once the queue drains
        self.broken = False  # reset: both ends fail
        self.reader_closed = False
        self.reader: trio.lowlevel.Task | None = None  # parked in read()
        self.due = math.inf  # the delivery time registered with the network

    def wake(self) -> None:
        task = self.reader
        if task is not None:
            self.reader = None
            trio.lowlevel.reschedule(task)

    def write(self, data: bytes) -> None:
        now = trio.current_time()
        at = max(self.last_at, now + self.net.latency(self.src, self.dst))
        self.last_at = at
        self.queue.append((at, data))
        if self.reader is not None and len(self.queue) == 1:
            self._schedule()

    def _schedule(self) -> None:
        """The parked reader woken when the first write falls due (if it may flow)."""
        at = self.queue[0][0]
        if at != self.due and self.net.flows(self.src, self.dst):
            self.due = at
            self.net.deliver_at(self, at)

    def _abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self.reader = None
        return trio.lowlevel.Abort.SUCCEEDED

    def take(self, max_bytes: int | None) -> bytes | None:
        """What the reader gets now (b"": end of stream), or None: it must wait."""
        if self.broken:
            raise trio.BrokenResourceError("connection reset by peer")
        if self.queue:
            at, data = self.queue[0]
            if at <= trio.current_time() and self.net.flows(self.src, self.dst):
                if max_bytes is not None and len(data) > max_bytes:
                    self.queue[0] = (at, data[max_bytes:])
                    return data[:max_bytes]
                self.queue.popleft()
                return data
            return None
        return b"" if self.eof else None

    async def read(self, max_bytes: int | None) -> bytes:
        """Parks until `take` has something: call it when `take` had nothing."""
        while True:
            self.reader = trio.lowlevel.current_task()
            if self.queue:
                self._schedule()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
            data = self.take(max_bytes)
            if data is not None:
                return data


class _RunLoopTimer:
    """A callback at a time on the run's clock, fired by trio's run loop itself.

    trio's only timer is a cancel scope's deadline, and its run loop fires a deadline by
    calling the scope's `_cancel` from its heap of deadlines (`Runner.deadlines`); this
    object sits in that heap as a scope would (the same `_registered_deadline` and
    `_cancel`, the same bookkeeping of the heap's live entries), so that a delivery costs
    one callback between two batches of tasks: where a task sleeping in a cancel scope
    cost a Cancelled raised and caught, a task step and a batch of the scheduler of its
    own, before the reader it woke could run in the next. Every delivery goes through
    the one timer, armed at the earliest; the MockClock jumps to it as to any deadline.
    (trio's internals, pinned by the venv: sim/ only, never the product.)"""

    __slots__ = ("_registered_deadline", "_callback", "_deadlines")

    def __init__(self, callback) -> None:
        self._registered_deadline = math.inf
        self._callback = callback
        self._deadlines = trio_run.GLOBAL_RUN_CONTEXT.runner.deadlines

    def arm(self, at: float) -> None:
        """Fire at `at`, or earlier if armed earlier already."""
        old = self._registered_deadline
        if at < old:
            if old != math.inf:
                self._deadlines.remove(old, self)  # type: ignore[arg-type]  # stale entry
            self._registered_deadline = at
            self._deadlines.add(at, self)  # type: ignore[arg-type]

    def _cancel(self, _reason: object = None) -> None:
        """What trio's run loop calls when the deadline passes (popped off its heap)."""
        self._deadlines.remove(self._registered_deadline, self)  # type: ignore[arg-type]
        self._registered_deadline = math.inf
        self._callback()


class SimStream(trio.abc.Stream):
    """One end of a connection: writes go out on `out`, reads come in on `into`."""

    def __init__(self, net: Network, out: _Pipe, into: _Pipe) -> None:
        self.net, self.out, self.into = net, out, into
        self.closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        if self.closed:
            raise trio.ClosedResourceError
        if self.out.broken or self.out.reader_closed:
            raise trio.BrokenResourceError("connection reset by peer")
        if data:
            self.out.write(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.closed:
            raise trio.ClosedResourceError
        # one schedule point, as a trio socket's: parking is one, else a yield after
        await trio.lowlevel.checkpoint_if_cancelled()
        data = self.into.take(max_bytes)
        if data is None:
            return await self.into.read(max_bytes)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self.out.eof = True
            self.out.wake()
            self.into.reader_closed = True
            self.into.wake()
            self.net.connections.pop(self, None)
        await trio.lowlevel.checkpoint()

    def reset(self) -> None:
        """Both directions fail at both ends (a RST)."""
        for pipe in (self.out, self.into):
            pipe.broken = True
            pipe.wake()


class SimListener(trio.abc.Listener[trio.abc.Stream]):
    def __init__(self, net: Network, owner: str, address: tuple[str, int]) -> None:
        self.net, self.owner, self.address = net, owner, address
        self.send, self.receive = trio.open_memory_channel[trio.abc.Stream](1000)

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self.receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError from None

    async def aclose(self) -> None:
        if self.net.listeners.get(self.address) is self:
            del self.net.listeners[self.address]
        self.send.close()
        await trio.lowlevel.checkpoint()


@dataclass
class Network:
    """Endpoints are names ("node-0", "producer-1"); addresses are (host, port)."""

    rng: random.Random
    listeners: dict[tuple[str, int], SimListener] = field(default_factory=dict)
    # a dict for its order: a set of streams iterates by address, which differs from one
    # process to the next, and `reset` would break them (and draw latencies) in that order
    connections: dict[SimStream, None] = field(default_factory=dict)
    _latency: dict[tuple[str, str], float] = field(default_factory=dict)
    _cut: set[tuple[str, str]] = field(default_factory=set)  # (src, dst) that carry nothing
    _paused: set[str] = field(default_factory=set)
    _isolated: set[str] = field(default_factory=set)
    _pipes: list[_Pipe] = field(default_factory=list)
    _topology: trio.Event = field(default_factory=trio.Event)
    # (due, n, pipe) of parked readers, woken by one timer for every pipe
    _deliveries: list[tuple[float, int, _Pipe]] = field(default_factory=list)
    _numbering: itertools.count = field(default_factory=itertools.count)
    _timer: _RunLoopTimer | None = None

    # -- delivery -------------------------------------------------------------------------

    def deliver_at(self, pipe: _Pipe, at: float) -> None:
        heapq.heappush(self._deliveries, (at, next(self._numbering), pipe))
        if self._timer is None:
            self._timer = _RunLoopTimer(self._deliver)
        self._timer.arm(at)

    def _deliver(self) -> None:
        """Wakes each parked reader whose pipe's first write has fallen due."""
        deliveries = self._deliveries
        now = trio.current_time()
        while deliveries and deliveries[0][0] <= now:
            at, _, pipe = heapq.heappop(deliveries)
            if pipe.due == at:  # else a later write's registration replaced it
                pipe.due = math.inf
                pipe.wake()
        if deliveries:
            assert self._timer is not None
            self._timer.arm(deliveries[0][0])

    # -- the topology's state -------------------------------------------------------------

    def latency(self, src: str, dst: str) -> float:
        base = self._latency.get((src, dst))
        if base is None:
            base = self._latency[(src, dst)] = self.rng.uniform(*LATENCY_S)
        return base + self.rng.random() * JITTER_S

    def flows(self, src: str, dst: str) -> bool:
        """Whether bytes from `src` reach `dst` now."""
        return ((src, dst) not in self._cut and src not in self._paused
                and dst not in self._paused and src not in self._isolated
                and dst not in self._isolated)

    def _changed(self) -> None:
        self._pipes = [p for p in self._pipes if not (p.broken or (p.eof and not p.queue))]
        for pipe in self._pipes:
            pipe.wake()
        self._topology.set()
        self._topology = trio.Event()

    def cut(self, src: str, dst: str, both_ways: bool = True) -> None:
        self._cut.add((src, dst))
        if both_ways:
            self._cut.add((dst, src))
        self._changed()

    def isolate(self, name: str) -> None:
        self._isolated.add(name)
        self._changed()

    def pause(self, name: str) -> None:
        self._paused.add(name)
        self._changed()

    def heal(self) -> None:
        self._cut.clear()
        self._isolated.clear()
        self._paused.clear()
        self._changed()

    def resume(self, name: str) -> None:
        self._paused.discard(name)
        self._changed()

    def reset(self, name: str) -> None:
        """Every connection of `name` reset (both ends see it fail)."""
        for stream in list(self.connections):
            if name in (stream.out.src, stream.out.dst):
                stream.reset()
                self.connections.pop(stream, None)

    def down(self, name: str) -> None:
        """`name` is gone: its listeners close, its connections break."""
        for address, listener in list(self.listeners.items()):
            if listener.owner == name:
                del self.listeners[address]
                listener.send.close()
        self.reset(name)

    # -- what the programs call -------------------------------------------------------------

    def listener(self, owner: str):
        """`broker.server.serve`'s `listen` for the node `owner`."""
        async def listen(host: str, port: int, what: str) -> list:
            address = (host, port)
            if address in self.listeners:
                raise OSError(errno.EADDRINUSE, f"{host}:{port}{what} is in use")
            listener = self.listeners[address] = SimListener(self, owner, address)
            await trio.lowlevel.checkpoint()
            return [listener]
        return listen

    def dialer(self, owner: str):
        """How `owner` opens a connection (a node's peer channels, a client's connections).
        Its waits are the dialer's own timeouts (broker.timeouts): a paused node's dial
        waits out the pause where it stands."""
        async def dial(host: str, port: int) -> trio.abc.Stream:
            listener = self.listeners.get((host, port))
            if listener is None:
                await timeouts.sleep(self.latency(owner, "?") * 2)
                raise OSError(errno.ECONNREFUSED, f"connection to {host}:{port} refused")
            peer = listener.owner
            with timeouts.move_on_after(CONNECT_TIMEOUT_S) as syn:
                while not (self.flows(owner, peer) and self.flows(peer, owner)):
                    await self._topology.wait()
            if syn.cancelled_caught:
                raise OSError(errno.ETIMEDOUT, f"connect to {host}:{port} timed out")
            await timeouts.sleep(self.latency(owner, peer) + self.latency(peer, owner))
            listener = self.listeners.get((host, port))
            if listener is None:
                raise OSError(errno.ECONNREFUSED, f"connection to {host}:{port} refused")
            there, back = _Pipe(self, owner, peer), _Pipe(self, peer, owner)
            self._pipes += (there, back)
            mine, theirs = SimStream(self, there, back), SimStream(self, back, there)
            self.connections.update(dict.fromkeys((mine, theirs)))
            try:
                listener.send.send_nowait(theirs)
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                raise OSError(errno.ECONNREFUSED, f"{host}:{port} refused") from None
            return mine
        return dial
