"""The Runtime's end of stage wake-ups (ADR 0012).

A stage runner that has written its ``status.json`` sends one empty datagram to a
Unix socket in the workspace root (``stage_runner.notify_runtime``); this listener
turns it into an :class:`asyncio.Event` the local executor's supervision waits on,
so an Attempt moves to its next stage within milliseconds instead of at the next
poll. A wake-up is only a hint: it carries nothing, the poll remains the fallback
(a runner that ends while the Runtime restarts is found by the next pass), and a
datagram from anyone else who can reach the socket only causes one more pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from pathlib import Path

log = logging.getLogger("site_runtime.local")

#: sun_path holds 108 bytes with its terminating NUL on Linux.
MAX_SOCKET_PATH_BYTES = 107


class StageWakeups:
    """A bound, non-blocking ``AF_UNIX``/``SOCK_DGRAM`` socket at ``path`` (mode 0600).

    ``event`` is set whenever at least one datagram arrived; the reader clears it.
    ``path`` is None when the socket could not be made (path longer than
    :data:`MAX_SOCKET_PATH_BYTES` bytes, or bind failed): the executor then only polls.
    Must be opened from inside a running event loop.
    """

    def __init__(self, path: Path) -> None:
        self.event = asyncio.Event()
        self.path: str | None = None
        self._sock: socket.socket | None = None
        self._identity: tuple[int, int] | None = None
        self._loop = asyncio.get_running_loop()
        target = str(path)
        if len(os.fsencode(target)) > MAX_SOCKET_PATH_BYTES:
            log.warning(
                "stage wake-ups off: %s is longer than %d bytes; stages are found by polling",
                target,
                MAX_SOCKET_PATH_BYTES,
            )
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISSOCK(os.lstat(target).st_mode):
                    raise FileExistsError(f"{target} exists and is not a socket")
                os.unlink(target)  # an earlier Runtime's socket
            sock.bind(target)
            # The workspace root is 0700 already; the socket itself is the Runtime's too.
            os.chmod(target, 0o600)
            bound = os.lstat(target)
            sock.setblocking(False)
            self._loop.add_reader(sock.fileno(), self._drain)
        except OSError as error:
            sock.close()
            log.warning("stage wake-ups off (%s); stages are found by polling", error)
            return
        self._sock, self.path = sock, target
        self._identity = (bound.st_dev, bound.st_ino)

    def _drain(self) -> None:
        assert self._sock is not None
        while True:
            try:
                self._sock.recv(1)
            except OSError:  # BlockingIOError: drained
                break
        self.event.set()

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up; True when one came. Clears it."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self.event.clear()
        return True

    def close(self) -> None:
        """Stop listening and remove the socket file (idempotent)."""
        if self._sock is None:
            return
        if not self._loop.is_closed():
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        if self.path:
            with contextlib.suppress(OSError):
                now = os.lstat(self.path)
                # A newer Runtime on the same workspace root may have bound it since.
                if (now.st_dev, now.st_ino) == self._identity:
                    os.unlink(self.path)
