"""An API outage for one test: a loopback TCP relay to the lab that can be cut.

The lab serves every engineer's tests, so it is never stopped to simulate an
unreachable API; instead a test talks to the lab through :class:`ApiOutage` and
cuts the relay (listener closed, open connections reset: clients see connection
refused) then restores it on the same port. TLS passes through unchanged (the lab's
certificate names 127.0.0.1), so the kubeconfig :meth:`ApiOutage.kubeconfig` writes
differs from the Runtime's only in the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from lightkube import KubeConfig
from ruamel.yaml import YAML

from tests.k8s.lab_clients import STATE


class ApiOutage:
    """``async with ApiOutage() as relay``: ``relay.port``, ``cut()``, ``restore()``."""

    def __init__(self) -> None:
        server = KubeConfig.from_file(STATE / "kubeconfig").get().cluster.server
        self.target_port = int(server.rsplit(":", 1)[1])
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> ApiOutage:
        await self.restore()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cut()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._links |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._links -= {writer, up_writer}

    async def restore(self) -> None:
        """Listen again (on the same port once one was chosen)."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
            self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Refuse new connections and reset the open ones."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._links):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._links.clear()

    def kubeconfig(self, path: Path) -> Path:
        """A copy of the Runtime's kubeconfig whose server is this relay (mode 0600)."""
        yaml = YAML()
        doc = yaml.load((STATE / "kubeconfig").read_text())
        doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            yaml.dump(doc, fh)
        return path
