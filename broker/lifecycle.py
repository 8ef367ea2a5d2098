"""A broker's life with the controller (Kafka's BrokerLifecycleManager): register,
catch up past the registration, heartbeat, get unfenced, and at shutdown hand its
leaderships over first.

Owns: `BrokerLifecycle` — BrokerRegistration with a fresh incarnation id per process, then a
BrokerHeartbeat every broker.heartbeat.interval.ms carrying the metadata offset the broker
has applied; `unfenced` is set once the controller says the broker is caught up and
unfenced, which is when the broker opens its client listener. `shutdown()` is controlled
shutdown: heartbeats with want_shut_down until the controller answers should_shut_down
(its leaderships have moved) or controlled.shutdown.timeout.ms passes.

The initial catch-up (Kafka's initialCatchUpFuture): `initial_catch_up` is set, and the
`catch_up_listeners` told, once this process has registered and the metadata it has
applied reaches past its registration (`caught_up_past_registration`: the broker epoch is
the offset of its RegisterBrokerRecord). Only then does the broker publish its first image
to its replicas (broker.broker): until then its metadata log may still name the previous
incarnation's registration, unfenced and leading, which the controller fences, with its
leaderships, before it takes the new one. Heartbeats ask to stay fenced (want_fence) until
the broker says it is ready to unfence (`set_ready_to_unfence`, Kafka's readyToUnfence),
so the listener never opens on replicas that have seen no image.

A STALE_BROKER_EPOCH answer (the controller lost or replaced our registration, for
instance after fencing us) makes it register again, with the same incarnation.

Every registration names `previous_broker_epoch`: the broker epoch the last clean shutdown
recorded in the data directory's clean-shutdown marker (broker.log.manager), -1 when the
last stop was a crash. The controller compares it with the epoch of the registration the
new incarnation replaces: a mismatch is an unclean shutdown, which costs the broker its
places in the ISRs and the eligible leader replicas (KIP-966), since it may have lost what
it had not fsynced.

Log directories (KIP-858): the registration names the data directory's id (all of them,
failed or not), and every heartbeat names the failed ones (offline_log_dirs); a directory
going offline sends a heartbeat at once rather than at the next interval, so that its
leaderships move within a round trip. Naming a failed directory in the registration too
is what lets the heartbeat after a re-registration take it offline again before the
controller unfences the broker.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Callable

import trio

from broker import timeouts
from broker.config import BrokerConfig
from broker.controller import features
from broker.controller_channel import ControllerChannel, ControllerUnavailable
from broker.listeners import SECURITY_PROTOCOL_IDS, NodeAddresses
from broker.log_dirs import LogDirFailureChannel
from broker.metadata_cache import MetadataCache
from protocol.errors import ErrorCode
from protocol.messages import BROKER_HEARTBEAT, BROKER_REGISTRATION, request_body

log = logging.getLogger("minibroker.lifecycle")

# the first versions with previous_broker_epoch (KIP-966) and offline_log_dirs
REGISTRATION_VERSION, HEARTBEAT_VERSION = 3, 1
# how soon a registration refused as a duplicate is tried again (Kafka backs off from 100 ms
# up to half the session timeout; a registration is cheap and this one is worth having soon)
DUPLICATE_RETRY_S = 0.25


def caught_up_past_registration(broker_epoch: int, applied_offset: int) -> bool:
    """Whether a broker registered at `broker_epoch` (the offset of its RegisterBrokerRecord)
    has applied that entry: `applied_offset` is the offset after the last entry applied.
    Kafka's controller answers isCaughtUp on the same comparison of the last applied one."""
    return 0 <= broker_epoch < applied_offset


class BrokerLifecycle:
    def __init__(self, config: BrokerConfig, addresses: NodeAddresses, cache: MetadataCache,
                 channel: ControllerChannel, log_dirs: LogDirFailureChannel | None = None):
        self.config = config
        self.node_id = config.broker_id
        self.addresses = addresses
        self.cache = cache
        self.channel = channel
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        # the epoch the last clean shutdown recorded (LogManager's marker), -1 after a crash
        self.previous_broker_epoch = -1
        self.fenced = True
        self.unfenced = trio.Event()
        self.want_shut_down = False
        self._heartbeat_now = trio.Event()
        self._shut_down_ok = trio.Event()
        # set once, never cleared: a registration lost and made again later (STALE_BROKER_
        # EPOCH) finds the replicas following the metadata already
        self.initial_catch_up = trio.Event()
        self.catch_up_listeners: list[Callable[[], None]] = []
        self.ready_to_unfence = False
        self._registration_refused = False
        self.log_dirs = log_dirs
        if log_dirs is not None:
            log_dirs.listeners.append(lambda _dir, _reason: self.heartbeat_soon())

    def _registration(self) -> dict:
        return {
            "broker_id": self.node_id, "cluster_id": self.cache.cluster_id,
            "incarnation_id": self.incarnation_id,
            "listeners": [{"name": e.name, "host": e.host, "port": e.port,
                           "security_protocol": SECURITY_PROTOCOL_IDS[e.security_protocol]}
                          for e in self.addresses.advertised],
            "features": [{"name": name, "min_supported_version": low,
                          "max_supported_version": high}
                         for name, (low, high) in features.SUPPORTED.items()],
            "rack": self.config.broker_rack, "is_migrating_zk_broker": False,
            "log_dirs": self.log_dirs.dir_ids() if self.log_dirs is not None else [],
            "previous_broker_epoch": self.previous_broker_epoch,
        }

    def _heartbeat(self) -> dict:
        return {"broker_id": self.node_id, "broker_epoch": self.broker_epoch,
                # Kafka's metadataOffset: the offset of the last entry applied, which the
                # controller compares with >= to the broker epoch (the offset of the
                # registration) and to a controlled shutdown's first entry; the cache keeps
                # the offset after it, which would count an entry not applied yet
                "current_metadata_offset": self.cache.offset - 1,
                "want_fence": not self.ready_to_unfence,
                "want_shut_down": self.want_shut_down,
                "offline_log_dirs": (self.log_dirs.offline_dir_ids()
                                     if self.log_dirs is not None else [])}

    def heartbeat_soon(self) -> None:
        """Send the next heartbeat (or registration) now rather than at the interval."""
        self._heartbeat_now.set()

    def metadata_applied(self) -> None:
        """The broker applied more committed metadata to its cache."""
        self._maybe_caught_up()

    def set_ready_to_unfence(self) -> None:
        """The broker published its first image to its replicas: heartbeats may now ask
        to be unfenced."""
        if not self.ready_to_unfence:
            self.ready_to_unfence = True
            self.heartbeat_soon()

    def _maybe_caught_up(self) -> None:
        if self.initial_catch_up.is_set() or not caught_up_past_registration(
                self.broker_epoch, self.cache.offset):
            return
        log.info("broker %d caught up past its registration at offset %d (metadata "
                 "applied to offset %d)", self.node_id, self.broker_epoch, self.cache.offset)
        self.initial_catch_up.set()
        for listener in self.catch_up_listeners:
            listener()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        interval = self.config.broker_heartbeat_interval_ms / 1000
        channel = self.channel
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register(channel)
                else:
                    response = await channel.forward(BROKER_HEARTBEAT, HEARTBEAT_VERSION,
                                                  request_body(BROKER_HEARTBEAT, HEARTBEAT_VERSION, self._heartbeat()))
                    self._on_heartbeat(response)
            except ControllerUnavailable as e:
                log.debug("no controller for the heartbeat: %s", e)
            if self.broker_epoch >= 0 and (self.fenced or self.want_shut_down):
                # catching up, or waiting for leaderships to move: ask again soon
                pause = min(interval, 0.05)
            elif self.broker_epoch < 0 and self._registration_refused:
                # our previous incarnation's session (killed, not shut down) runs out at a
                # moment only the controller knows: a registration is cheap, so ask often
                # rather than lose up to a heartbeat interval after it expires
                pause = min(interval, DUPLICATE_RETRY_S)
            else:
                pause = interval
            with timeouts.move_on_after(pause):
                await self._heartbeat_now.wait()
            self._heartbeat_now = trio.Event()

    async def _register(self, channel) -> None:
        response = await channel.forward(BROKER_REGISTRATION, REGISTRATION_VERSION,
                                      request_body(BROKER_REGISTRATION, REGISTRATION_VERSION,
                                                   self._registration()))
        code = ErrorCode(response.get("error_code", 0))
        self._registration_refused = code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
        if code == ErrorCode.NONE:
            self.broker_epoch = response["broker_epoch"]
            log.info("broker %d registered with epoch %d", self.node_id,
                     self.broker_epoch)
            self._heartbeat_now.set()
            # the registration's entry may be applied here before its answer arrives
            self._maybe_caught_up()
        elif code == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
            log.error("another process is registered as broker %d; this one stays fenced "
                      "until its session expires", self.node_id)
        else:
            log.warning("broker registration refused: %s", code.name)

    def _on_heartbeat(self, response: Any) -> None:
        code = ErrorCode(response.get("error_code", 0))
        if code == ErrorCode.STALE_BROKER_EPOCH:
            log.warning("the controller no longer knows broker epoch %d: registering again",
                        self.broker_epoch)
            self.broker_epoch = -1
            self._set_fenced(True)
            return
        if code != ErrorCode.NONE:
            log.debug("heartbeat answered %s", code.name)
            return
        self._set_fenced(bool(response["is_fenced"]))
        if response.get("should_shut_down"):
            self._shut_down_ok.set()

    def _set_fenced(self, fenced: bool) -> None:
        if fenced == self.fenced:
            return
        self.fenced = fenced
        if fenced:
            self.unfenced = trio.Event()
            log.warning("broker %d is fenced", self.node_id)
        else:
            self.unfenced.set()
            log.info("broker %d is unfenced", self.node_id)

    async def shutdown(self) -> bool:
        """Controlled shutdown; True when the controller confirmed it in time."""
        if self.broker_epoch < 0:
            return False
        self.want_shut_down = True
        self._heartbeat_now.set()
        with timeouts.move_on_after(self.config.controlled_shutdown_timeout_ms / 1000):
            await self._shut_down_ok.wait()
            return True
        log.warning("controlled shutdown was not confirmed in time; stopping anyway")
        return False

