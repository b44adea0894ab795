"""The processes of the development stack and their settings (docs/operators.md
lists the same variables for real deployments)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from metallo.devstack.k8s_lab import lab_state
from metallo.devstack.layout import REPO_ROOT, Layout
from metallo.devstack.rabbitmq import DEV_AMQP_URL, broker_url, principal
from metallo.messaging.topology import Topology

SLURM_LAB_STATE = Path(os.environ.get("METALLO_SLURM_LAB_STATE", "/var/lib/metallo-slurm-lab"))
K8S_SITE_ID = "lab-k8s"
#: ``python -m site_runtime`` exits 2 for bad settings and 3 for a journal mismatch.
RUNTIME_FINAL_EXITS = frozenset({2, 3})
LAB_ACCOUNTS_FILE = "lab-accounts.json"    # the lab issuer's logins (password hashes)
LAB_PASSWORDS_FILE = "lab-passwords.json"  # their passwords, for `metallo dev login`
SERVICES = ("site_coordination", "workload_portfolio", "execution_core", "pipeline_coordination")
#: Each component's operations endpoint (/healthz, /readyz, /metrics) on loopback:
#: METALLO_DEV_OPS_PORT_BASE (default 9461) plus the component's place here.
OPS_COMPONENTS = (*SERVICES, "site_runtime", "site_runtime_k8s")
#: Most replicas of each service ``dev up --replicas`` starts (the Site Runtime runs once).
MAX_REPLICAS = 4


@dataclass(frozen=True)
class Options:
    """Choices of one ``dev up``: executor (local|slurm) of the ``site_id`` Runtime, edge
    port, broker, prefix, whether a second Runtime serves the Kubernetes lab's Site, and
    how many replicas of each service run (1..:data:`MAX_REPLICAS`).

    ``amqp_url`` names the broker and the stack's own virtual host
    (``METALLO_DEV_AMQP_URL``, default ``DEV_AMQP_URL``). Every component connects as
    its own RabbitMQ user (``devstack.rabbitmq``), never with credentials in this URL;
    the operator's requests use them when the URL has any, else the CLI's user."""

    executor: str
    edge_port: int = 8443
    amqp_url: str = DEV_AMQP_URL
    topology_prefix: str = ""
    site_id: str = "lab-slurm"
    kubernetes: bool = False
    replicas: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise ValueError(f"replicas must be 1..{MAX_REPLICAS}, not {self.replicas}")

    @property
    def edge_url(self) -> str:
        """The Site edge's base URL, ``https://127.0.0.1:<edge_port>``."""
        return f"https://127.0.0.1:{self.edge_port}"

    @property
    def issuer_url(self) -> str:
        """The lab issuer (``iss`` of member tokens), served on the edge."""
        return f"{self.edge_url}/lab-issuer"

    @property
    def git_base(self) -> str:
        """Base URL of the lab Git server's repositories."""
        return f"{self.edge_url}/git"


@dataclass
class Component:
    """One supervised process: ``python -m <module> <args>`` with ``env`` on top of ours."""

    name: str
    module: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # process | queue:<name> (consumed: a command server consumes its queries queue last,
    # so that one tells its commands and queries are both served) | https:<url> | ops
    # (its own /readyz: a second replica, whose queue and edge port the first already serves)
    ready: str = "process"
    # Exit statuses a restart cannot cure (the Site Runtime's bad settings, journal
    # mismatch): the supervisor leaves the component stopped and ``failed`` at once.
    final_exits: frozenset[int] = frozenset()

    @property
    def ops_url(self) -> str | None:
        """``http://<METALLO_OPS_ADDRESS>`` when the component has an operations endpoint."""
        address = self.env.get("METALLO_OPS_ADDRESS")
        return f"http://{address}" if address else None

    def argv(self) -> list[str]:
        """The command line: this interpreter, ``-m <module>`` and the arguments."""
        return [sys.executable, "-m", self.module, *self.args]


def runnable(module: str) -> bool:
    """True when ``python -m module`` exists in this checkout (``<module>/__main__.py``)."""
    try:
        return importlib.util.find_spec(f"{module}.__main__") is not None
    except ModuleNotFoundError:
        return False


def slurm_lab_running() -> bool:
    """True when ``scripts/slurm-lab status`` says every lab daemon runs and slurmrestd answers."""
    script = REPO_ROOT / "scripts" / "slurm-lab"
    if not script.exists() or shutil.which("scontrol") is None:
        return False
    try:
        done = subprocess.run([str(script), "status"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def common_env(layout: Layout, options: Options) -> dict[str, str]:
    """Settings every service reads. ``dev up`` checked autovacuum while migrating
    (``prepare.migrate_all``) and said so once: the services' own migrations at start
    do not repeat it. Member tokens come from the lab issuer on the edge; only the
    default assertion grants hold (``metallo.messaging.intake``)."""
    from metallo.messaging.intake import DEFAULT_ASSERTERS
    from metallo.persistence.migrations import AUTOVACUUM_CHECKED_ENV

    return {
        "PYTHONUNBUFFERED": "1",
        AUTOVACUUM_CHECKED_ENV: "1",
        "METALLO_TOPOLOGY_PREFIX": options.topology_prefix,
        "METALLO_BUS_ASSERTERS": DEFAULT_ASSERTERS,
        "METALLO_OIDC_ISSUER": options.issuer_url,
        "METALLO_OIDC_JWKS_URL": f"{options.issuer_url}/.well-known/jwks.json",
        "METALLO_OIDC_CA_FILE": str(layout.certs / "ca.pem"),
        "METALLO_GOVERNANCE_FILE": str(REPO_ROOT / "examples" / "governance.yaml"),
        "METALLO_DEFERRALS_FILE": str(REPO_ROOT / "contracts" / "deferrals.json"),
        # The repository policy (metallo.repository_policy): development reads local
        # repositories and the lab Git server, never the stack's own state.
        "METALLO_LOCAL_REPOSITORIES": "allow",
        "METALLO_GIT_HOSTS": urlsplit(options.edge_url).netloc,
        "METALLO_STATE_DIRS": str(layout.root),
    }


def slurm_lab_issuer_key() -> Path:
    """The Slurm lab's RS256 key: slurmctld trusts only its JWKS."""
    return SLURM_LAB_STATE / "issuer" / "private.pem"


def issuer_key(layout: Layout) -> Path:
    """The one key the dev stack's lab issuer signs with, whatever the executor: the
    Slurm lab's when the machine has it (member tokens for Slurm must verify there),
    else the stack's own ``issuer/private.pem`` (made by ``prepare.ensure_issuer_key``).
    Never chosen by executor: a login from before ``dev down`` must verify after a
    ``dev up`` with another executor."""
    lab = slurm_lab_issuer_key()
    return lab if lab.is_file() else layout.issuer / "private.pem"


def _queries_queue(owner: str) -> str:
    """``queue:<owner>.queries``: ready once a consumer is attached to the service's
    query queue, the last one its command server starts (the stack's topology prefix
    is added when checking)."""
    return f"queue:{Topology().query_queue(owner)}"


def plan(layout: Layout, options: Options) -> tuple[list[Component], list[str]]:
    """The components to run and the names of those this checkout cannot run yet.

    Order matters: Site Coordination (with the edge and the lab Git server) first,
    the Site Runtime last; ``down`` stops them in reverse.
    """
    env = common_env(layout, options)
    certs = layout.certs
    site_coordination = Component(
        "site_coordination", "site_coordination", ["serve"], {
            **env,
            "METALLO_SITE_EDGE_HOST": "127.0.0.1",
            "METALLO_SITE_EDGE_PORT": str(options.edge_port),
            "METALLO_SITE_EDGE_TLS_CERT": str(certs / "server.pem"),
            "METALLO_SITE_EDGE_TLS_KEY": str(certs / "server-key.pem"),
            "METALLO_LAB_GIT_ROOT": str(layout.git_root),
            "METALLO_LAB_GIT_OPERATOR_TOKEN_FILE": str(layout.secrets / "git-operator-token"),
            "METALLO_LAB_ISSUER_DIR": str(layout.issuer),
            "METALLO_LAB_ISSUER_URL": options.issuer_url,
            "METALLO_LAB_ACCOUNTS_FILE": str(layout.secrets / LAB_ACCOUNTS_FILE),
            "METALLO_LAB_ISSUER_KEY": str(issuer_key(layout)),
        }, ready=f"https:{options.edge_url}/healthz")
    workload_portfolio = Component(
        "workload_portfolio", "workload_portfolio", ["serve"], {
            **env,
            "METALLO_GIT_CA_FILE": str(certs / "ca.pem"),
            "METALLO_GIT_CREDENTIALS_FILE": str(layout.secrets / "git-credentials.json"),
        }, ready=_queries_queue("workload_portfolio"))
    execution_core = Component("execution_core", "execution_core", [], {
        **env,
        # Development timing: observe an active Attempt every 2 s (production default 30 s)
        # so that demos and tests see a Run end soon after its native end.
        "METALLO_EXECUTION_CORE_OBSERVE_INTERVAL_SECONDS": os.environ.get(
            "METALLO_EXECUTION_CORE_OBSERVE_INTERVAL_SECONDS", "2"),
        "METALLO_EXECUTION_CORE_RESULT_RECHECK_SECONDS": os.environ.get(
            "METALLO_EXECUTION_CORE_RESULT_RECHECK_SECONDS", "5"),
        # Idle waits of the launch worker and the supervisor (production default 1 s):
        # 0.2 s takes launch → native start from about 3.4 s to about 1.4 s here.
        "METALLO_EXECUTION_CORE_LAUNCH_POLL_SECONDS": os.environ.get(
            "METALLO_EXECUTION_CORE_LAUNCH_POLL_SECONDS", "0.2"),
        "METALLO_EXECUTION_CORE_SUPERVISOR_POLL_SECONDS": os.environ.get(
            "METALLO_EXECUTION_CORE_SUPERVISOR_POLL_SECONDS", "0.2"),
    }, ready=_queries_queue("execution_core"))
    pipeline_coordination = Component("pipeline_coordination", "pipeline_coordination", [],
                                      dict(env), ready=_queries_queue("pipeline_coordination"))
    runtimes = [runtime_component(layout, options)]
    if options.kubernetes:
        runtimes.append(kubernetes_runtime_component(layout, options))
    for service in (site_coordination, workload_portfolio, execution_core, pipeline_coordination):
        service.env["METALLO_AMQP_URL"] = broker_url(layout, options.amqp_url,
                                                     principal(service.name))
    services = [site_coordination, workload_portfolio, execution_core, pipeline_coordination]
    if options.replicas > 1:
        # The edge replicas share one port (SO_REUSEPORT): the Runtime and the CLI keep
        # one URL, and the kernel hands new connections to a live replica.
        site_coordination.env["METALLO_SITE_EDGE_REUSE_PORT"] = "1"
    base = int(os.environ.get("METALLO_DEV_OPS_PORT_BASE", "9461"))
    for c in (*services, *runtimes):
        c.env["METALLO_OPS_ADDRESS"] = f"127.0.0.1:{base + OPS_COMPONENTS.index(c.name)}"
    ordered = [*services, *replicas(services, options.replicas, base), *runtimes]
    components, missing = [], []
    for c in ordered:
        if runnable(c.module):
            components.append(c)
        elif c.name not in missing and "-" not in c.name:
            missing.append(c.name)
    return components, missing


def replicas(services: list[Component], count: int, base: int) -> list[Component]:
    """Replicas 2..``count`` of each service: ``<name>-<k>``, the first's settings with
    their own operations port (after every first replica's), ready by their own
    ``/readyz``. Started after every first replica, so the stack serves before they join."""
    extra = []
    for k in range(2, count + 1):
        for index, service in enumerate(services):
            port = base + len(OPS_COMPONENTS) + (k - 2) * len(services) + index
            extra.append(Component(f"{service.name}-{k}", service.module, list(service.args),
                                   {**service.env, "METALLO_OPS_ADDRESS": f"127.0.0.1:{port}"},
                                   ready="ops"))
    return extra


def runtime_component(layout: Layout, options: Options) -> Component:
    """The one Site Runtime, pulling the ``(site_id, environment=slurm)`` stream."""
    state = layout.runtime / options.executor
    env = {
        "PYTHONUNBUFFERED": "1",
        "SITE_API_URL": options.edge_url,
        "SITE_API_CA_FILE": str(layout.certs / "ca.pem"),
        "SITE_API_CREDENTIAL_FILE": str(layout.secrets / "runtime-grant"),
        "RUNTIME_EXECUTOR": options.executor,
        "RUNTIME_STATE_DIRECTORY": str(state),
        "REPOSITORY_CA_FILE": str(layout.certs / "ca.pem"),
        # The local executor runs 4 Attempts at once by default; a dev machine takes more.
        "RUNTIME_LOCAL_MAX_ACTIVE": os.environ.get("RUNTIME_LOCAL_MAX_ACTIVE", "8"),
    }
    if options.executor == "slurm":
        env.update({
            "SLURM_REST_URL": "http://127.0.0.1:6820",
            "SLURM_REST_ALLOW_INSECURE_LOOPBACK": "true",
            "SLURM_JWT_ISSUER": f"{options.edge_url}/lab-issuer",
            "SLURM_JWT_AUTHORIZED_PARTY": "metallo-site-runtime",
            "SLURM_JWKS_URL": f"file:{SLURM_LAB_STATE / 'issuer' / 'jwks.json'}",
            "SLURM_WORKSPACE_ROOT": str(SLURM_LAB_STATE / "workspaces"),
        })
    return Component("site_runtime", "site_runtime", [], env, final_exits=RUNTIME_FINAL_EXITS)


def kubernetes_runtime_component(layout: Layout, options: Options) -> Component:
    """The second Site Runtime: the kubernetes executor on the Kubernetes lab, pulling
    the ``(lab-k8s, k8s)`` stream with its own grant (docs/site-runtime.md, Kubernetes)."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "SITE_API_URL": options.edge_url,
        "SITE_API_CA_FILE": str(layout.certs / "ca.pem"),
        "SITE_API_CREDENTIAL_FILE": str(layout.secrets / "runtime-grant-k8s"),
        "RUNTIME_EXECUTOR": "kubernetes",
        "RUNTIME_STATE_DIRECTORY": str(layout.runtime / "kubernetes"),
        "KUBERNETES_KUBECONFIG": str(lab_state() / "kubeconfig"),
        "KUBERNETES_SITE_ID": K8S_SITE_ID,
        # The lab's kubelet runs Pods as this host's member users (docs/k8s-lab.md).
        "KUBERNETES_RUN_AS": "passwd",
        "KUBERNETES_POLL_SECONDS": "1",
        # The Pods (member users) read the lab Git server's CA from a world-readable copy.
        "REPOSITORY_CA_FILE": str(layout.root / "public" / "ca.pem"),
    }
    return Component("site_runtime_k8s", "site_runtime", [], env,
                     final_exits=RUNTIME_FINAL_EXITS)
