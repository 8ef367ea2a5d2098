"""Channels from this broker to other brokers' inter-broker listeners, by node id.

Owns: `BrokerChannels`, one lazily opened PeerChannel per broker address, found through the
metadata image (the broker's endpoint on `inter.broker.listener.name`) and reopened when a
broker's address changes. Used by the transaction coordinator's marker writer and by
partition leaders asking a transaction coordinator to verify a partition (KIP-890); this
broker's own address is reached the same way, through its listener.
"""

from __future__ import annotations

import trio

from broker.net.peer import PeerChannel


class BrokerChannels:
    def __init__(self, broker, nursery: trio.Nursery, client_id: str):
        self.broker = broker
        self._nursery = nursery
        self._client_id = client_id
        self._channels: dict[int, tuple[tuple[str, int], PeerChannel]] = {}

    def get(self, node_id: int) -> PeerChannel | None:
        """The channel to `node_id`, or None while the image has no endpoint for it."""
        endpoint = self.broker.metadata_cache.endpoint(node_id,
                                                       self.broker.addresses.inter_broker)
        if endpoint is None:
            return None
        address = (endpoint.host, endpoint.port)
        known = self._channels.get(node_id)
        if known is not None and known[0] == address:
            return known[1]
        if known is not None:
            self._nursery.start_soon(known[1].aclose)
        channel = PeerChannel(endpoint.host, endpoint.port, self._nursery,
                              client_id=self._client_id,
                              opener=self.broker.inter_broker_opener)
        self._channels[node_id] = (address, channel)
        return channel

    async def aclose(self) -> None:
        for _address, channel in self._channels.values():
            await channel.aclose()
        self._channels.clear()
