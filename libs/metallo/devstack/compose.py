"""``python -m metallo.devstack compose-setup --dir DIR``: the one-shot ``setup``
service of ``docker-compose.yml``. In the shared volume it makes what ``dev up``
makes under ``var/dev`` — the edge certificate (for the edge's service name),
the lab Git operator token and Git credentials — after migrating Site
Coordination's database, and declares the notifications queue (as the Go API's
RabbitMQ user, whose bridge queue it stands for). ``compose-grant`` (the one-shot
``runtime-grant`` service, once Site Coordination serves) asks for the Site
Runtime's ``psb_`` grant as an operator command, asserted by the Go API's user (the
compose stack has no lab logins). ``compose-broker`` (``devstack.compose_broker``)
makes the RabbitMQ users before the broker starts.
Both are idempotent: existing files are kept, so a restart keeps the same grant.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from metallo.devstack.components import Options
from metallo.devstack.layout import REPO_ROOT, Layout, write_secret
from metallo.devstack.operator import create_runtime_grant
from metallo.devstack.prepare import ensure_git_credentials, ensure_notifications_queue
from metallo.messaging.broker import amqp_url_from_environment

SERVICE_UID = 10001  # the unprivileged user of the image (docker-compose.yml)


async def setup(directory: str, edge_host: str, site: str) -> int:
    """Prepare ``directory``; 0 when done."""
    from metallo.dev_certificates import make_dev_certificates
    from metallo.persistence.engine import database_url
    from metallo.persistence.migrations import migrate

    layout = Layout(Path(directory))
    layout.make()
    options = Options(executor="local", amqp_url=amqp_url_from_environment(), site_id=site)
    await migrate(database_url("site_coordination"),
                  REPO_ROOT / "services" / "site_coordination" / "migrations")
    if not (layout.certs / "server.pem").exists():
        make_dev_certificates(layout.certs, names=(edge_host, "localhost", "127.0.0.1"))
    ensure_git_credentials(layout, options)
    # The services reach the edge by its service name, not 127.0.0.1.
    token = (layout.secrets / "git-operator-token").read_text().strip()
    write_secret(layout.secrets / "git-credentials.json", json.dumps(
        {f"{edge_host}:{options.edge_port}": {"username": "operator", "secret": token}}))
    await ensure_notifications_queue(options, options.amqp_url)  # as the Go API (compose)
    give_to_services(layout)
    print(f"compose setup done in {directory}")
    return 0


async def grant(directory: str, site: str) -> int:
    """Make the Site Runtime's grant in ``directory`` unless it has one; 0 when done."""
    layout = Layout(Path(directory))
    if not (layout.secrets / "runtime-grant").exists():
        options = Options(executor="local", amqp_url=amqp_url_from_environment(), site_id=site)
        grant_id = await create_runtime_grant(layout, options)
        print(f"runtime grant {grant_id} for {site}/slurm")
    give_to_services(layout)
    return 0


def give_to_services(layout: Layout) -> None:
    """The one-shot services run as root; the services run as SERVICE_UID and must own
    the volume."""
    if os.geteuid() == 0:
        for path in [layout.root, *layout.root.rglob("*")]:
            os.chown(path, SERVICE_UID, SERVICE_UID)
