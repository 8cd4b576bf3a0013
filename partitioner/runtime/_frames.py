"""The wire between the library and the interpreters it starts: length-prefixed pickled frames
on a pipe, and the typed message a rank sends. Torch-free."""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any, NamedTuple

__all__ = ["Message", "Reply", "write_frame", "read_frame"]

_HEADER = struct.Struct("!Q")


class Message(NamedTuple):
    """One report from a rank: ``kind`` is "progress" (``value`` a status line), "ok" (``value``
    the entry function's result) or "error" (``value`` the error and where it happened)."""

    kind: str
    rank: int
    value: Any


class Reply(NamedTuple):
    """What a worker sends back: ``ok`` with the function's result as ``value``, or not ok with
    the error and where it happened as ``value``."""

    ok: bool
    value: Any


def write_frame(stream: IO[bytes], value: Any) -> None:
    """Pickle ``value`` onto ``stream`` behind its length; a value that cannot be pickled raises
    here, in the sender, where its error can still be reported."""
    data = pickle.dumps(value)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next value on ``stream``; :class:`EOFError` when the stream ends."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the stream ended")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the stream ended inside a frame")
    return pickle.loads(data)
