"""tests/k8s/outage.py: an unreachable API for one test, the lab untouched."""

from __future__ import annotations

import httpx2
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Namespace

from tests.k8s.outage import ApiOutage

pytestmark = pytest.mark.k8s


async def test_the_api_through_a_relay_that_is_cut_then_restored(k8s_lab, tmp_path):
    async with ApiOutage() as relay:
        client = AsyncClient(KubeConfig.from_file(relay.kubeconfig(tmp_path / "kubeconfig")))
        try:
            assert (await client.get(Namespace, "metallo-demo")).metadata.name == "metallo-demo"
            await relay.cut()
            with pytest.raises(httpx2.TransportError):
                await client.get(Namespace, "metallo-demo")
            await relay.restore()
            assert (await client.get(Namespace, "metallo-demo")).metadata.name == "metallo-demo"
        finally:
            await client._client.close()
