"""Execution Core: launches, Runs, Attempts, supervision and cancellation (seed 004 §3–4, §7C).

- ``domain/`` — pure rules: planning (:mod:`.domain.planning`), the Run lifecycle
  (:mod:`.domain.lifecycle`), state words and reason codes.
- ``application/`` — use cases (LaunchRun, CancelRun, GetRun, ListRuns), the launch
  worker, the Run Supervisor, result application, and the ports they use.
- ``adaptors/`` — PostgreSQL tables and store, the governance-file authority, the
  Workload Portfolio query, RabbitMQ bindings, the assembled service.
- ``__main__`` — ``python -m execution_core``. Guide: docs/runs.md.
"""
