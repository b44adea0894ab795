"""An EdgeClient whose HTTP goes to a handler (httpx.MockTransport plays the edge,
an older version of it included; the real routes are tested with Site Coordination)."""

from __future__ import annotations

import httpx

from site_runtime.adaptors.edge.client import EdgeClient, EdgeSettings


def client_with(handler) -> EdgeClient:
    """An EdgeClient for ``https://edge.test`` whose requests ``handler`` answers."""
    client = EdgeClient(EdgeSettings(base_url="https://edge.test", credential="psb_test"))
    client._client = httpx.AsyncClient(
        base_url="https://edge.test", transport=httpx.MockTransport(handler)
    )
    return client
