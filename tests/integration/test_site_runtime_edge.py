"""The Runtime's HTTPS path to the real Site edge: bounded back-off while the edge is
down, TLS verified against the configured CA, the ``psb_`` grant read afresh from
its file and never logged (seed 004 §4B/§4C)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import trustme

from site_runtime.adaptors.edge.client import EdgeClient, EdgeSettings
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from tests.integration.site_runtime_support import batch_payload, new_runtime


async def test_worker_backs_off_while_the_edge_is_down_then_delivers(edge, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    seq = await edge.append(
        "prepare", payload=batch_payload("https://127.0.0.1:1/git/demo.git", "a" * 40, ["true"])
    )
    runtime = await new_runtime(edge, tmp_path)
    secret = runtime.grant_file.read_text().strip()
    await edge.stop()
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.worker.run(stop))
    try:
        for _ in range(100):
            if caplog.text.count("Site edge unreachable") >= 3:
                break
            await asyncio.sleep(0.05)
        assert caplog.text.count("Site edge unreachable") >= 3
        assert runtime.delivery.entry(seq) is None
        await edge.start()  # same port
        for _ in range(200):
            entry = runtime.delivery.entry(seq)
            if entry is not None and entry.state == "acknowledged":
                break
            await asyncio.sleep(0.05)
        assert runtime.delivery.entry(seq).state == "acknowledged"
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await runtime.close()
    assert "worker stopped" in caplog.text
    assert secret.startswith("psb_") and secret not in caplog.text


async def test_tls_is_verified_against_the_configured_ca(edge, tmp_path):
    other_ca = trustme.CA()
    other = tmp_path / "other-ca.pem"
    other_ca.cert_pem.write_to_path(str(other))
    grant = tmp_path / "grant"
    grant.write_text(await edge.grant())
    client = EdgeClient(EdgeSettings(base_url=edge.url, ca_file=other, credential_file=grant))
    try:
        with pytest.raises(EdgeUnavailable) as failed:
            await client.next_command(0)
        assert "psb_" not in str(failed.value)
    finally:
        await client.close()
    with pytest.raises(ValueError):
        EdgeClient(
            EdgeSettings(
                base_url=edge.url.replace("https", "http"),
                ca_file=edge.ca_file,
                credential_file=grant,
            )
        )


async def test_the_grant_file_is_read_on_every_request(edge, tmp_path):
    grant = tmp_path / "grant"
    grant.write_text(await edge.grant())
    client = EdgeClient(
        EdgeSettings(base_url=edge.url, ca_file=edge.ca_file, credential_file=grant)
    )
    try:
        assert await client.next_command(0) is None
        grant.write_text("psb_" + "0" * 40)  # rotated to a grant the edge does not know
        with pytest.raises(EdgeRefused) as refused:
            await client.next_command(0)
        assert refused.value.status == 401
        grant.write_text("not-a-grant")
        with pytest.raises(EdgeUnavailable):
            await client.next_command(0)
        grant.write_text(await edge.grant())
        assert await client.next_command(0) is None
    finally:
        await client.close()
