"""The wire between the library and the interpreters it starts: length-prefixed pickled frames
on a pipe, and the typed message a rank sends. Torch-free."""

from __future__ import annotations

import logging
import os
import pickle
import struct
import sys
import threading
import time
from typing import IO, Any, NamedTuple

__all__ = [
    "Message",
    "Reply",
    "write_frame",
    "read_frame",
    "exit_with_parent",
    "child_env",
    "PARENT_ENV",
    "set_channel",
    "send",
    "child_pythonpath",
    "quiet_server_loggers",
]

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


_CHANNEL: IO[bytes] | None = None  # in a rank or a worker: its result pipe (set by its main)
_LOCK = threading.Lock()


def set_channel(stream: IO[bytes]) -> None:
    global _CHANNEL
    _CHANNEL = stream


def send(message: Message | Reply) -> None:
    """In a rank or a worker: write ``message`` to the process that started it (from any thread);
    elsewhere nothing."""
    if _CHANNEL is not None:
        with _LOCK:
            write_frame(_CHANNEL, message)


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


def quiet_server_loggers() -> None:
    """In a child the library started: a job that imported a web app's modules when it unpickled
    (a Streamlit page's functions) would log the server's warnings once per call, "missing
    ScriptRunContext" above all, where no server runs; its loggers keep errors only. Touches
    Streamlit only when the job already imported it."""
    streamlit_logger = sys.modules.get("streamlit.logger")
    if streamlit_logger is not None:
        streamlit_logger.set_log_level(logging.ERROR)


def exit_with_parent(poll_s: float = 0.5) -> None:
    """In a child the library started: exit at once when its parent dies (SIGKILL included), so
    no worker or rank outlives the run that started it. A daemon thread watches the parent id
    (an orphan is re-parented); works wherever ``os.getppid`` does. The parent's id comes from
    :data:`PARENT_ENV` where the parent set it (:func:`child_env`): a parent killed while the child
    was still importing is noticed too, though the child was re-parented before it looked."""
    parent = int(os.environ.pop(PARENT_ENV, "0") or 0) or os.getppid()  # not passed on to its own children
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


PARENT_ENV = "PARTITION_EXPLORER_PARENT_PID"


def child_env(root: str) -> dict[str, str]:
    """The environment of a child interpreter the library starts: this one's, the package on its
    path (:func:`child_pythonpath`) and this process's id (:func:`exit_with_parent`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = child_pythonpath(root)
    env[PARENT_ENV] = str(os.getpid())
    return env


def child_pythonpath(root: str) -> str:
    """PYTHONPATH for a child interpreter: the package's root, then this process's own search
    path, so a model class the caller imported from its own folders (a test module, a
    notebook's directory) unpickles in the child as it does here."""
    entries = [root, *(p for p in sys.path if p and os.path.isdir(p))]
    extra = os.environ.get("PYTHONPATH")
    if extra:
        entries.append(extra)
    return os.pathsep.join(dict.fromkeys(entries))
