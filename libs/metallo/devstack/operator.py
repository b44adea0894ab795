"""The dev stack's operator requests over RabbitMQ: its Site Runtime's command
grant (``CreateCommandGrant``/``RevokeCommandGrant`` to Site Coordination) and the
count of active Runs (``CountActiveRuns`` to Execution Core).

The stack acts as the governance file's operator ``m-operator`` (examples/
governance.yaml; ``METALLO_DEV_OPERATOR`` names another). Site Coordination must
be serving when a grant is asked for: the supervisor creates it after Site
Coordination is ready and before it starts the Site Runtime, and revokes it after
the Runtime stopped and before Site Coordination stops.
"""

from __future__ import annotations

import asyncio
import json
import os

from google.protobuf.message import Message

from metallo.devstack.components import Options
from metallo.devstack.layout import Layout, write_secret
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import RequestClient, Topology
from metallo.operator_requests import create_grant_command, new_grant_secret, revoke_grant_command

DEFAULT_OPERATOR = "m-operator"
REQUEST_TIMEOUT_SECONDS = 20.0
GRANT_LIFETIME = "7d"  # outlives a working week, never a dev machine's year


def dev_operator() -> str:
    """The operator member the dev stack acts as."""
    return os.environ.get("METALLO_DEV_OPERATOR") or DEFAULT_OPERATOR


def operator_token(layout: Layout, options: Options) -> str | None:
    """An access token of the stack's operator from the lab issuer (password grant with
    the password ``dev up`` made, ``secrets/lab-passwords.json``); never saved. None when
    the layout has no lab logins at all (the request then asserts the operator, which the
    owner accepts only from a principal its asserter list names). Raises
    OperatorLoginError when the operator has no login among them or the issuer refuses."""
    from metallo.cli.credentials import password_login
    from metallo.cli.exits import CliError
    from metallo.devstack.components import LAB_PASSWORDS_FILE

    member = dev_operator()
    try:
        passwords = json.loads((layout.secrets / LAB_PASSWORDS_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        passwords = {}
    password = passwords.get(member) if isinstance(passwords, dict) else None
    if not password:
        raise OperatorLoginError(f"the lab issuer has no login for the operator {member!r} "
                                 "(give it an oidc_subject in examples/governance.yaml)")
    try:
        return password_login(options.issuer_url, member, password,
                              ca_file=str(layout.certs / "ca.pem")).access_token
    except CliError as exc:
        raise OperatorLoginError(f"the operator {member!r} could not log in: {exc}") from None


class OperatorLoginError(RuntimeError):
    """The dev stack's operator could not obtain a member token."""


def operator_broker_url(layout: Layout, options: Options) -> str:
    """The operator speaks as a member client: the CLI's RabbitMQ user (``dev up`` made
    it) on the stack's virtual host. An ``options.amqp_url`` that carries its own
    credentials is used as it is (a test's own principal)."""
    from urllib.parse import urlsplit

    from metallo.devstack.rabbitmq import CLI, broker_url

    if urlsplit(options.amqp_url).password is not None:
        return options.amqp_url
    return broker_url(layout, options.amqp_url, CLI)


async def operator_request(options: Options, message: Message,
                           timeout: float = REQUEST_TIMEOUT_SECONDS,
                           layout: Layout | None = None) -> Message:
    """Send one operator request on the stack's broker with the operator's member token
    (the owner takes the acting member from it); the typed reply. Raises
    OperatorLoginError and the client's Rejected / OutcomeUncertain / ServiceUnavailable."""
    layout = layout or Layout.default()
    token = await asyncio.to_thread(operator_token, layout, options)
    client = RequestClient(operator_broker_url(layout, options),
                           Topology(prefix=options.topology_prefix))
    await client.start()
    try:
        return await client.request(message, timeout=timeout, member_token=token)
    finally:
        await client.close()


async def create_runtime_grant(layout: Layout, options: Options, site_id: str | None = None,
                               environment: str = "slurm", name: str = "runtime-grant") -> str:
    """A new ``psb_`` grant for (site, environment) written to ``secrets/<name>``
    (0600); returns its grant id. Site Coordination must be serving."""
    secret = new_grant_secret()
    reply = await operator_request(options, create_grant_command(
        dev_operator(), site_id or options.site_id, environment, GRANT_LIFETIME,
        "metallo dev up: Site Runtime", secret), layout=layout)
    write_secret(layout.secrets / name, secret + "\n")
    return reply.grant.grant_id


async def revoke_runtime_grant(options: Options, grant_id: str) -> bool:
    """Revoke the dev stack's runtime grant (True when it was active)."""
    reply = await operator_request(options, revoke_grant_command(dev_operator(), grant_id))
    return reply.revoked


async def count_active_runs(options: Options, timeout: float = 5.0,
                            site_id: str = "") -> int:
    """Runs of the stack not yet terminal (accepted ones too), from Execution Core;
    with ``site_id`` only those placed on that Site."""
    reply = await operator_request(options, ec.CountActiveRuns(
        metadata={"acting_member": dev_operator()}, site_id=site_id), timeout=timeout)
    return int(reply.active)


async def count_active_attempts(options: Options, site_id: str, attempt_ids: list[str],
                                timeout: float = 5.0) -> tuple[int, float]:
    """How many Runs on ``site_id`` are not terminal and have one of ``attempt_ids`` as
    their current Attempt, and Execution Core's reconciliation period (seconds)."""
    reply = await operator_request(options, ec.CountActiveRuns(
        metadata={"acting_member": dev_operator()}, site_id=site_id,
        attempt_ids=attempt_ids), timeout=timeout)
    return int(reply.active), float(reply.lost_after_seconds)


def runtime_grant_hooks(layout: Layout, options: Options) -> tuple[dict, dict]:
    """The supervisor's ``before_start`` and ``after_stop`` hooks of each Site Runtime:
    create its grant (``grant_id`` / ``k8s_grant_id`` in state.json), revoke it
    (``grant_revoked`` / ``k8s_grant_revoked``). The lab-k8s Runtime (with
    ``options.kubernetes``) has its own grant for the ``(lab-k8s, k8s)`` stream."""
    from metallo.devstack.components import K8S_SITE_ID

    runtimes = {"site_runtime": ("grant", None, "slurm", "runtime-grant")}
    if options.kubernetes:
        runtimes["site_runtime_k8s"] = ("k8s_grant", K8S_SITE_ID, "k8s", "runtime-grant-k8s")
    before: dict = {}
    after: dict = {}
    for component, (key, site_id, environment, name) in runtimes.items():
        made: dict[str, str] = {}

        async def create(key=key, site_id=site_id, environment=environment, name=name,
                         made=made) -> dict:
            made["id"] = await create_runtime_grant(layout, options, site_id, environment, name)
            return {f"{key}_id": made["id"], f"{key}_revoked": False}

        async def revoke(key=key, made=made) -> dict:
            if "id" not in made:
                return {}
            await revoke_runtime_grant(options, made["id"])
            return {f"{key}_revoked": True}

        before[component], after[component] = create, revoke
    return before, after
