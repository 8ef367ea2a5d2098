"""Length-prefixed framing: int32 big-endian size, then that many bytes.

Owns: `FrameDecoder`, which accumulates received bytes and hands out whole frames. The
size prefix is checked against a hard maximum before a single byte of the body is kept,
so a hostile or confused peer (a TLS hello on a plaintext port reads as a ~369 MB length)
costs us four bytes, not an allocation.
"""

from __future__ import annotations

from protocol.errors import FrameTooLarge

NEED_DATA = None  # next_frame() result while the frame is incomplete, as in h11

DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # socket.request.max.bytes


class FrameDecoder:
    __slots__ = ("_buf", "_pos", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME):
        self._buf = bytearray()
        self._pos = 0
        self.max_frame = max_frame

    def receive_data(self, data: bytes | bytearray) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def next_frame(self) -> bytes | None:
        """Return the next whole frame body, or NEED_DATA; raise FrameTooLarge early."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            self._compact()
            return NEED_DATA
        size = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
        if size < 0 or size > self.max_frame:
            raise FrameTooLarge(f"frame size {size} outside 0..{self.max_frame}")
        end = pos + 4 + size
        if len(buf) < end:
            self._compact()
            return NEED_DATA
        frame = bytes(buf[pos + 4:end])
        self._pos = end
        if self._pos == len(buf):
            buf.clear()
            self._pos = 0
        return frame

    def _compact(self) -> None:
        # drop consumed bytes only when waiting, so a burst of pipelined frames is cut out
        # of the buffer without shifting it once per frame
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload
