"""The test suite's RabbitMQ principals, on a virtual host of its own (ADR 0030).

Every test session (each pytest process) makes one virtual host ``metallo-test-<tag>``
and, on it, the principals the dev stack has — one user per service, the Go API,
the CLI — with the dev stack's permission patterns (``metallo.devstack.rabbitmq``)
over every test namespace (``tX.``, the ``namespace`` fixture), plus:

* ``testkit``: the test-only ledger service (``tests/integration/ledger``), a
  service like the others;
* ``harness``: test doubles of the services, raw publishes and consumers of the
  messaging tests, the topology clean-up. It may use any name under a test
  namespace but assert a member only for testkit messages: a platform command
  asserted without a member token is believed only from the principals ADR 0026
  names (``METALLO_BUS_ASSERTERS`` is set from :func:`assertion_grants`).

``guest`` has no permission on this virtual host. The virtual host and the users
are deleted when the session ends (:func:`close`).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import quote

from metallo.devstack.rabbitmq import (
    Permissions,
    client_permissions,
    definitions,
    delete_user,
    delete_vhost,
    go_api_permissions,
    import_definitions,
    service_permissions,
    wait_until_accepted,
    with_user,
)
from metallo.messaging.intake import ASSERTION_ROLES, assertion_grants_text

SERVICES = ("site_coordination", "workload_portfolio", "execution_core",
            "pipeline_coordination", "testkit")
# The ``namespace`` fixture's prefixes (``t`` + 10 hex digits + ``.``), optionally
# with one more lowercase label (a second namespace beside the first).
NAMESPACE_REGEX = r"t[0-9a-f]{10}\.(?:[a-z]+\.)?"
BROKER = os.environ.get("METALLO_TEST_BROKER", "127.0.0.1:5672")


def harness_permissions() -> Permissions:
    """Any name under a test namespace, plus the default exchange."""
    names = rf"^{NAMESPACE_REGEX}.*$"
    return Permissions(configure=names, write=names + r"|^amq\.default$", read=names)


@dataclass
class TestBus:
    """One session's virtual host and its principals (``url(role)``)."""

    tag: str = field(default_factory=lambda: f"mt{uuid.uuid4().hex[:10]}")
    _passwords: dict[str, str] = field(default_factory=dict)
    created: bool = False

    @property
    def vhost(self) -> str:
        return f"metallo-test-{self.tag}"

    def user(self, role: str) -> str:
        """The RabbitMQ user of ``role`` (``execution_core`` → ``<tag>-execution-core``)."""
        return f"{self.tag}-{role.replace('_', '-')}"

    def roles(self) -> dict[str, Permissions]:
        perms = {s: service_permissions(s, prefix_regex=NAMESPACE_REGEX) for s in SERVICES}
        perms["go_api"] = go_api_permissions(prefix_regex=NAMESPACE_REGEX)
        perms["cli"] = client_permissions(prefix_regex=NAMESPACE_REGEX)
        perms["harness"] = harness_permissions()
        return perms

    def base_url(self) -> str:
        """The virtual host's URL without credentials."""
        return f"amqp://{BROKER}/{quote(self.vhost, safe='')}"

    def url(self, role: str) -> str:
        """The URL ``role`` connects with (creating the virtual host on first use)."""
        self.create()
        return with_user(self.base_url(), self.user(role), self._passwords[role])

    def assertion_grants(self) -> str:
        """``METALLO_BUS_ASSERTERS`` of the session: ADR 0026's table with this session's
        users, and the harness for the testkit's messages only."""
        roles = {role: self.user(role) for role in ASSERTION_ROLES}
        return assertion_grants_text(roles) + f";{self.user('harness')}=metallo.testkit.v1.*"

    def create(self) -> None:
        """Make the virtual host and every principal once (``rabbitmqctl``, as root)."""
        if self.created:
            return
        roles = self.roles()
        self._passwords = {role: uuid.uuid4().hex for role in roles}
        import_definitions(definitions(
            {self.user(r): (self._passwords[r], perm) for r, perm in roles.items()}, self.vhost))
        self.created = True

        async def accepted() -> None:
            for role in roles:
                await wait_until_accepted(with_user(self.base_url(), self.user(role),
                                                    self._passwords[role]))

        # Called from sync fixtures and from inside running event loops alike.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, accepted()).result()

    def close(self) -> None:
        """Delete the virtual host (with every queue of the session) and the users."""
        if not self.created:
            return
        delete_vhost(self.vhost)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(delete_user, [self.user(r) for r in self.roles()]))
        self.created = False


BUS = TestBus()


def role_url(role: str) -> str:
    """``BUS.url(role)``: the session principal ``role``'s URL."""
    return BUS.url(role)
