"""The k8s/ manifests, checked offline: every file parses, is
listed in the kustomization, is labelled, every Deployment runs a real
``python -m`` entry with probes and resources, every ConfigMap, Secret, volume,
claim and Service reference resolves, and every Secret (with its keys) is
documented for operators in docs/operators.md."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
PART_OF = "app.kubernetes.io/part-of"


def load(path: Path) -> list[dict]:
    return [d for d in YAML(typ="safe").load_all(path.read_text()) if d]


@pytest.fixture(scope="module")
def kustomization() -> dict:
    return load(K8S / "kustomization.yaml")[0]


@pytest.fixture(scope="module")
def documents(kustomization) -> list[dict]:
    docs = []
    for name in kustomization["resources"]:
        docs.extend(load(K8S / name))
    return docs


def of_kind(documents, kind):
    return [d for d in documents if d["kind"] == kind]


def documented_secrets() -> dict[str, set[str]]:
    """Secret name → keys from docs/operators.md's table rows ``| `name` | `key`, … |``."""
    found: dict[str, set[str]] = {}
    for line in (ROOT / "docs" / "operators.md").read_text().splitlines():
        m = re.match(r"^\|\s*`(metallo-[a-z0-9-]+)`\s*\|([^|]*)\|", line)
        if m:
            found.setdefault(m.group(1), set()).update(re.findall(r"`([^`]+)`", m.group(2)))
    return found


def test_every_manifest_is_listed_and_parses(kustomization):
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    assert kustomization["namespace"] == "metallo"


def test_identity_namespace_and_labels(documents):
    for d in documents:
        meta = d["metadata"]
        assert d["apiVersion"] and d["kind"] and meta["name"], d
        assert meta["labels"][PART_OF] == "metallo", meta["name"]
        if d["kind"] != "Namespace":
            assert meta["namespace"] == "metallo", meta["name"]
    names = [(d["kind"], d["metadata"]["name"]) for d in documents]
    assert len(names) == len(set(names)), "duplicate objects"


def test_deployments_run_real_entries_with_probes_and_resources(documents):
    deployments = of_kind(documents, "Deployment")
    assert {d["metadata"]["name"] for d in deployments} == {
        "workload-portfolio", "execution-core", "pipeline-coordination", "site-coordination",
        "site-runtime"}
    for d in deployments:
        spec = d["spec"]
        template_labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= template_labels.items()
        assert template_labels[PART_OF] == "metallo"
        pod = spec["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert c["image"]
            assert c["args"][:2] == ["python", "-m"]
            module = c["args"][2]
            assert (ROOT / "services" / module / "__main__.py").exists(), module
            assert c["resources"]["requests"] and c["resources"]["limits"]
            for probe_kind in ("readinessProbe", "livenessProbe"):
                probe = c[probe_kind]
                if "exec" in probe:
                    command = probe["exec"]["command"]
                    assert command[:2] == ["python", "-m"]
                    assert importlib.util.find_spec(command[2]) is not None, command
                    if command[3] == "queue":
                        assert command[4] == f"{module}.commands"
                else:
                    port = probe["httpGet"]["port"]
                    assert port in {p["name"] for p in c.get("ports", [])}, port
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            assert mounts <= {v["name"] for v in pod.get("volumes", [])}


def test_config_maps_claims_and_secrets_resolve(documents):
    config_maps = {d["metadata"]["name"]: d for d in of_kind(documents, "ConfigMap")}
    claims = {d["metadata"]["name"] for d in of_kind(documents, "PersistentVolumeClaim")}
    secrets = documented_secrets()
    assert secrets, "docs/operators.md lists no Secrets"
    used_secrets = set()
    for d in of_kind(documents, "Deployment"):
        pod = d["spec"]["template"]["spec"]
        for v in pod.get("volumes", []):
            if "configMap" in v:
                assert v["configMap"]["name"] in config_maps
            if "secret" in v:
                assert v["secret"]["secretName"] in secrets, v["secret"]["secretName"]
                used_secrets.add(v["secret"]["secretName"])
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in claims
        for c in pod["containers"]:
            for source in c.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets.get(ref["name"], set()), ref
                    used_secrets.add(ref["name"])
                else:
                    assert "value" in env, env["name"]
                    assert not re.search(r"(?i)password|secret|token", env["name"] + env["value"])
    for user in of_kind(documents, "User"):  # RabbitMQ users (Messaging Topology Operator)
        name = user["spec"]["importCredentialsSecret"]["name"]
        assert {"username", "password"} <= secrets.get(name, set()), name
        used_secrets.add(name)
    assert used_secrets == set(secrets), "docs/operators.md and k8s/ disagree on the Secrets"


def test_each_service_has_its_own_least_privilege_rabbitmq_user(documents):
    from metallo.devstack.components import SERVICES
    from metallo.devstack.rabbitmq import (
        CLI,
        GO_API,
        client_permissions,
        go_api_permissions,
        principal,
        service_permissions,
    )

    granted = {d["spec"]["user"]: d["spec"]["permissions"] for d in of_kind(documents, "Permission")}
    expected = {principal(s): service_permissions(s) for s in SERVICES}
    expected.update({GO_API: go_api_permissions(), CLI: client_permissions()})
    assert set(granted) == set(expected) and "guest" not in granted
    for user, perm in expected.items():
        assert granted[user] == {"configure": perm.configure, "write": perm.write, "read": perm.read}
    urls = set()
    for d in of_kind(documents, "Deployment"):
        for c in d["spec"]["template"]["spec"]["containers"]:
            for env in c.get("env", []):
                if env["name"] == "METALLO_AMQP_URL":
                    urls.add(env["valueFrom"]["secretKeyRef"]["key"])
    assert len(urls) == len(SERVICES)  # one broker login per service, none shared


def test_runtime_state_is_a_persistent_single_writer(documents):
    runtime = next(d for d in of_kind(documents, "Deployment") if d["metadata"]["name"] == "site-runtime")
    assert runtime["spec"]["replicas"] == 1 and runtime["spec"]["strategy"]["type"] == "Recreate"
    pod = runtime["spec"]["template"]["spec"]
    state = next(v for v in pod["volumes"] if v["name"] == "state")
    assert "persistentVolumeClaim" in state
    container = pod["containers"][0]
    config = next(d for d in of_kind(documents, "ConfigMap")
                  if d["metadata"]["name"] == "metallo-site-runtime")["data"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "state")["mountPath"]
    assert config["RUNTIME_STATE_DIRECTORY"] == mount
    assert [p["name"] for p in container.get("ports", [])] == ["ops"], \
        "a Site Runtime exposes only its operations endpoint (probes, metrics)"
    # Every runtime setting is one the Site Runtime actually reads.
    source = "".join(p.read_text() for p in (ROOT / "services" / "site_runtime").rglob("*.py"))
    for name in config:
        assert name in source, name



PLATFORM_SERVICES = {"workload-portfolio", "execution-core", "pipeline-coordination",
                     "site-coordination"}


def test_platform_services_run_two_replicas_kept_up_through_disruptions(documents):
    # ADR 0034: every service but the Site Runtime is safe as several replicas.
    deployments = {d["metadata"]["name"]: d for d in of_kind(documents, "Deployment")}
    budgets = {d["metadata"]["name"]: d for d in of_kind(documents, "PodDisruptionBudget")}
    assert set(budgets) == PLATFORM_SERVICES
    for name in PLATFORM_SERVICES:
        spec = deployments[name]["spec"]
        assert spec["replicas"] == 2, name
        assert spec["strategy"] == {"type": "RollingUpdate",
                                    "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}, name
        pod = spec["template"]["spec"]
        assert not [v for v in pod.get("volumes", []) if "persistentVolumeClaim" in v], \
            f"{name}: a replica set shares no claim"
        spread = pod["topologySpreadConstraints"][0]
        assert spread["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
        budget = budgets[name]["spec"]
        assert budget["minAvailable"] == 1
        assert budget["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_platform_manifests_are_valid_kubernetes(documents):
    import kubernetes_validate

    # The RabbitMQ messaging-topology operator's User and Permission are custom
    # resources without a schema here; every built-in object is validated.
    builtin = [d for d in documents if not d["apiVersion"].startswith("rabbitmq.com/")]
    assert {d["kind"] for d in builtin} >= {"Deployment", "PodDisruptionBudget", "Service"}
    for d in builtin:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)

def test_services_select_deployments_and_name_their_ports(documents):
    deployments = of_kind(documents, "Deployment")
    for svc in of_kind(documents, "Service"):
        selector = svc["spec"]["selector"]
        targets = [d for d in deployments
                   if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert len(targets) == 1, svc["metadata"]["name"]
        ports = {p["name"] for c in targets[0]["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in ports


def test_probes_use_each_services_operations_endpoint(documents):
    # Readiness is /readyz (database, migrations, broker, consumers; docs/operators.md,
    # Probes and metrics), liveness /healthz, both on the `ops` port, which is the
    # port METALLO_OPS_ADDRESS in the container's ConfigMap listens on.
    config = {d["metadata"]["name"]: d.get("data", {}) for d in of_kind(documents, "ConfigMap")}
    for d in of_kind(documents, "Deployment"):
        for c in d["spec"]["template"]["spec"]["containers"]:
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            assert "ops" in ports, c["name"]
            assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "ops"}, c["name"]
            assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "ops"}, c["name"]
            settings = {}
            for source in c.get("envFrom", []):
                settings.update(config[source["configMapRef"]["name"]])
            settings.update({e["name"]: e.get("value") for e in c.get("env", [])})
            host, _, port = settings["METALLO_OPS_ADDRESS"].rpartition(":")
            assert host and int(port) == ports["ops"], (c["name"], settings["METALLO_OPS_ADDRESS"])


KUBERNETES_SITE = K8S / "kubernetes-site"
K8S_VERSION = "1.31.0"


@pytest.fixture(scope="module")
def site_documents() -> list[dict]:
    kustomization = load(KUBERNETES_SITE / "kustomization.yaml")[0]
    assert set(kustomization["resources"]) == {
        p.name for p in KUBERNETES_SITE.glob("*.yaml")} - {"kustomization.yaml"}
    docs = []
    for name in kustomization["resources"]:
        docs.extend(load(KUBERNETES_SITE / name))
    return docs


def test_kubernetes_site_manifests_are_valid_kubernetes(site_documents):
    import kubernetes_validate

    for d in site_documents:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        assert d["metadata"]["labels"][PART_OF] == "metallo", d["metadata"]["name"]


def test_the_runtime_may_impersonate_only_named_members(site_documents):
    role = next(d for d in of_kind(site_documents, "ClusterRole")
                if d["metadata"]["name"] == "metallo-site-runtime")
    impersonate = [r for r in role["rules"] if "impersonate" in r["verbs"]]
    assert {tuple(r["resources"]) for r in impersonate} == {("users",), ("groups",)}
    assert all(r["resourceNames"] and "*" not in r["resourceNames"] for r in impersonate)
    creates = [r for r in role["rules"] if {"create", "update", "patch", "*"} & set(r["verbs"])]
    assert creates == [], "the Runtime creates nothing as itself"
    binding = of_kind(site_documents, "ClusterRoleBinding")[0]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "site-runtime", "namespace": "metallo-system"}]
    runtime = next(d for d in of_kind(site_documents, "Deployment"))
    assert runtime["spec"]["template"]["spec"]["serviceAccountName"] == "site-runtime"
    config = of_kind(site_documents, "ConfigMap")[0]["data"]
    assert config["RUNTIME_EXECUTOR"] == "kubernetes" and config["KUBERNETES_KUBECONFIG"] == "in-cluster"
    source = "".join(p.read_text() for p in (ROOT / "services" / "site_runtime").rglob("*.py"))
    for name in config:
        assert name in source, name


def test_project_namespace_template_has_roles_bindings_and_quota(site_documents):
    namespaces = {d["metadata"]["name"] for d in of_kind(site_documents, "Namespace")}
    assert "metallo-demo" in namespaces
    quota = of_kind(site_documents, "ResourceQuota")[0]
    assert quota["metadata"]["namespace"] == "metallo-demo"
    assert {"pods", "requests.cpu", "requests.memory", "requests.storage"} <= set(quota["spec"]["hard"])
    roles = {d["metadata"]["name"] for d in of_kind(site_documents, "Role")}
    for binding in of_kind(site_documents, "RoleBinding"):
        assert binding["roleRef"]["name"] in roles
        assert binding["metadata"]["namespace"] == "metallo-demo"
