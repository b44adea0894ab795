"""The k8s/ manifests, checked offline (issue 8, item 2): every file parses, is
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
    from metallo.devstack.rabbitmq import CLI, GO_API, client_permissions, principal, service_permissions

    granted = {d["spec"]["user"]: d["spec"]["permissions"] for d in of_kind(documents, "Permission")}
    expected = {principal(s): service_permissions(s) for s in SERVICES}
    expected.update({GO_API: client_permissions(), CLI: client_permissions()})
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
    assert "ports" not in container, "a Site Runtime exposes no inbound port"
    # Every runtime setting is one the Site Runtime actually reads.
    source = "".join(p.read_text() for p in (ROOT / "services" / "site_runtime").rglob("*.py"))
    for name in config:
        assert name in source, name


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
