"""Who is asking on the command bus: member tokens, trusted principals, forgeries refused.

The session's real RabbitMQ users (tests/bus.py) with the dev stack's least-privilege
patterns, a real lab issuer key and JWKS, a real governance file, the ledger
service's real CommandServer on PostgreSQL; ``guest`` refused on the test's virtual
host.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import aio_pika
import aiormq
import pytest
from sqlalchemy import text

from metallo.common.v1 import common_pb2
from metallo.devstack.rabbitmq import with_user
from metallo.identity.access import AccessTokenVerifier
from metallo.identity.issuer import LabIssuer, generate_key
from metallo.identity.verify import FileJwksSource, JwksCache
from metallo.messaging import OutboxRelay, Rejected, RequestClient
from metallo.messaging.envelope import encode
from metallo.messaging.intake import AssertionGrants, Intake, governance_directory
from metallo.messaging.server import fingerprint
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.bus import BUS
from tests.integration.ledger.service import ledger_server

pytestmark = pytest.mark.integration

ISSUER = "https://issuer.test/lab-issuer"
GOVERNANCE = """version: 1
sites: {}
members:
  m-alice: {name: Alice, oidc_subject: lab-alice}
  m-bob: {name: Bob, oidc_subject: lab-bob}
projects:
  demo:
    sites: []
    members: {m-alice: [runs.read], m-bob: [runs.read]}
"""


@pytest.fixture
def principals():
    """The session's principals (tests/bus.py) in three parts: the owner (the testkit
    service), a trusted gateway (the Go API's user), an unprivileged member client
    (the CLI's user, which may not assert)."""
    roles = {"owner": "testkit", "gateway": "go_api", "mallory": "cli"}
    return ({r: BUS.user(role) for r, role in roles.items()},
            {r: BUS.url(role) for r, role in roles.items()})


@pytest.fixture
def issuer(tmp_path: Path) -> LabIssuer:
    return LabIssuer(generate_key(tmp_path / "issuer"), issuer=ISSUER)


@pytest.fixture
async def ledger(ledger_engine, topology, principals, issuer, tmp_path):
    names, urls = principals
    governance = tmp_path / "governance.yaml"
    governance.write_text(GOVERNANCE)
    intake = Intake(
        AssertionGrants({names["gateway"]: ("*",)}), own_principal=names["owner"],
        tokens=AccessTokenVerifier(ISSUER, frozenset({"metallo-cli"}),
                                   JwksCache(FileJwksSource(tmp_path / "issuer" / "jwks.json"))),
        directory=governance_directory(str(governance)))
    server = ledger_server(ledger_engine, urls["owner"], topology, intake=intake)
    await server.start()
    relay = OutboxRelay(ledger_engine, urls["owner"], topology, owner="ledger", poll_seconds=0.05)
    await relay.start()
    clients = {}
    for role in ("gateway", "mallory"):
        clients[role] = RequestClient(urls[role], topology)
        await clients[role].start()
    yield clients
    for client in clients.values():
        await client.close()
    await relay.stop()
    await server.stop()


def deposit(member: str, command_id: str | None = None, account: str = "acc") -> tk.Deposit:
    return tk.Deposit(metadata=common_pb2.CommandMetadata(
        command_id=command_id or str(uuid.uuid4()), acting_member=member, project="demo"),
        account=account, amount=5)


async def balance(engine, account: str = "acc") -> int | None:
    async with engine.connect() as conn:
        return (await conn.execute(text("SELECT balance FROM accounts WHERE account = :a"),
                                   {"a": account})).scalar()


async def receipts(engine) -> list[tuple[str, str]]:
    async with engine.connect() as conn:
        rows = await conn.execute(text("SELECT command_id, fingerprint FROM command_receipts"))
        return [tuple(r) for r in rows]


async def test_a_forged_command_from_an_unprivileged_principal_is_refused_and_changes_nothing(
        ledger, ledger_engine):
    with pytest.raises(Rejected) as refused:
        await ledger["mallory"].request(deposit("m-alice"))
    assert refused.value.code == "unauthenticated"
    assert refused.value.details["principal"] == BUS.user("cli")
    with pytest.raises(Rejected) as query:
        await ledger["mallory"].request(tk.GetBalance(
            metadata=common_pb2.QueryMetadata(acting_member="m-alice", project="demo"), account="acc"))
    assert query.value.code == "unauthenticated"
    assert await balance(ledger_engine) is None
    assert await receipts(ledger_engine) == []


async def test_rabbitmq_refuses_a_user_id_that_is_not_the_connections_user(
        principals, topology, ledger, ledger_engine):
    names, urls = principals
    connection = await aio_pika.connect(urls["mallory"])
    try:
        channel = await connection.channel()
        exchange = await channel.get_exchange(topology.commands_exchange)
        message = encode(deposit("m-alice"), reply_to="nowhere")
        message.user_id = names["gateway"]  # pretend to be the trusted gateway
        with pytest.raises(Exception) as closed:
            await exchange.publish(message, routing_key="testkit.command.Deposit")
            await channel.declare_queue(exclusive=True)  # the closed channel shows here
        assert "user_id" in str(closed.value) or "PRECONDITION" in str(closed.value)
    finally:
        await connection.close()
    assert await balance(ledger_engine) is None


async def test_a_trusted_principal_may_assert_the_acting_member(ledger, ledger_engine):
    reply = await ledger["gateway"].request(deposit("m-alice"))
    assert reply.balance == 5 and await balance(ledger_engine) == 5


async def test_a_member_token_proves_the_member_and_fills_in_acting_member(
        ledger, ledger_engine, issuer):
    token, _ = issuer.issue_access("lab-alice", "metallo-cli")
    command = deposit("")
    reply = await ledger["mallory"].request(command, member_token=token)
    assert reply.balance == 5
    command.metadata.acting_member = "m-alice"  # what the owner decided on
    assert await receipts(ledger_engine) == [(command.metadata.command_id, fingerprint(command))]
    named = await ledger["mallory"].request(deposit("m-alice"), member_token=token)
    assert named.balance == 10


async def test_a_body_naming_another_member_is_refused(ledger, ledger_engine, issuer):
    bobs, _ = issuer.issue_access("lab-bob", "metallo-cli")
    with pytest.raises(Rejected) as refused:
        await ledger["mallory"].request(deposit("m-alice"), member_token=bobs)
    assert refused.value.code == "member-token-mismatch"
    assert refused.value.details == {"token_member": "m-bob", "named_member": "m-alice"}
    assert await balance(ledger_engine) is None and await receipts(ledger_engine) == []


async def test_a_bad_token_is_refused_unsaved_so_a_retry_with_a_good_one_is_decided(
        ledger, ledger_engine, issuer, tmp_path):
    command_id = str(uuid.uuid4())
    other = LabIssuer(generate_key(tmp_path / "other"), issuer=ISSUER)
    forged, _ = other.issue_access("lab-alice", "metallo-cli")  # a key the issuer never published
    wrong_client, _ = issuer.issue_access("lab-alice", "another-client")
    stranger, _ = issuer.issue_access("lab-carol", "metallo-cli")
    for token, code, reason in ((forged, "member-token-rejected", "unknown-key"),
                                (wrong_client, "member-token-rejected", "authorized-party"),
                                (stranger, "member-not-bound", None),
                                ("not-a-jwt", "member-token-rejected", "malformed")):
        with pytest.raises(Rejected) as refused:
            await ledger["mallory"].request(deposit("", command_id), member_token=token)
        assert refused.value.code == code
        if reason:
            assert refused.value.details["reason"] == reason
        assert token not in refused.value.message
    assert await receipts(ledger_engine) == []
    good, _ = issuer.issue_access("lab-alice", "metallo-cli")
    reply = await ledger["mallory"].request(deposit("", command_id), member_token=good)
    assert reply.balance == 5


async def test_guest_cannot_open_the_tests_virtual_host(principals):
    _names, urls = principals
    member_client = await aio_pika.connect(urls["mallory"], timeout=10)  # the host is open...
    await member_client.close()
    with pytest.raises(aiormq.exceptions.AMQPError) as refused:  # ...but not to guest
        await aio_pika.connect(with_user(BUS.base_url(), "guest", "guest"), timeout=10)
    assert "Connection.Close" in str(refused.value)
