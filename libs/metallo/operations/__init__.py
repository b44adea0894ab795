"""A process's operations endpoint (docs/operators.md, Probes and metrics): one HTTP
server per process with ``/healthz``, ``/readyz`` and ``/metrics``.

Modules: :mod:`.server` (the endpoint), :mod:`.readiness` (checks), :mod:`.metrics`
(the metrics). Import them directly: this package imports nothing, so that a client
that only counts (the messaging layer) does not load the HTTP server.
"""
