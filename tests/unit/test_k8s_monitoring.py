"""k8s/monitoring (offline): the PodMonitor scrapes the `ops` port of every Metallo
Deployment, the Grafana dashboard parses, and every metric the code defines or the
dashboard queries is listed in docs/operators.md (Metrics)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "k8s" / "monitoring"
METRIC = re.compile(r"\bmetallo_[a-z_]+")
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def load_all(path: Path) -> list[dict]:
    return [d for d in YAML(typ="safe").load_all(path.read_text()) if d]


def deployments() -> list[dict]:
    kustomization = load_all(ROOT / "k8s" / "kustomization.yaml")[0]
    return [d for name in kustomization["resources"] for d in load_all(ROOT / "k8s" / name)
            if d["kind"] == "Deployment"]


def documented() -> set[str]:
    text = (ROOT / "docs" / "operators.md").read_text()
    return {base(m) for m in re.findall(r"^\| `(metallo_[a-z_]+)` \|", text, re.M)}


def defined_in_code() -> set[str]:
    sources = [*(ROOT / "libs" / "metallo" / "operations").glob("*.py"),
               *(ROOT / "services").glob("*/adaptors/*metrics.py")]
    names = set()
    for path in sources:
        names |= {base(m) for m in re.findall(r'"(metallo_[a-z_]+)"', path.read_text())}
    return names


def test_kustomization_lists_the_pod_monitor_and_the_dashboard():
    kustomization = load_all(MONITORING / "kustomization.yaml")[0]
    assert kustomization["resources"] == ["podmonitor.yaml"]
    files = kustomization["configMapGenerator"][0]["files"]
    assert all((MONITORING / f).is_file() for f in files) and files


def test_pod_monitor_scrapes_every_deployment_on_its_ops_port():
    monitor = load_all(MONITORING / "podmonitor.yaml")[0]
    assert monitor["kind"] == "PodMonitor"
    wanted = monitor["spec"]["selector"]["matchLabels"]
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["path"] == "/metrics"
    found = deployments()
    assert len(found) == 5
    for d in found:
        template = d["spec"]["template"]
        assert wanted.items() <= template["metadata"]["labels"].items(), d["metadata"]["name"]
        ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        assert endpoint["port"] in ports, d["metadata"]["name"]


def test_dashboard_queries_only_documented_metrics():
    dashboard = json.loads((MONITORING / "metallo-dashboard.json").read_text())
    queried = {base(m) for p in dashboard["panels"] for t in p["targets"]
               for m in METRIC.findall(t["expr"])}
    assert queried, "the dashboard queries no metric"
    assert sorted(queried - documented()) == []
    assert sorted(queried - defined_in_code()) == []


def test_every_metric_in_the_code_is_documented_and_the_other_way_round():
    code = defined_in_code()
    assert {"metallo_requests", "metallo_runs", "metallo_site_stream_depth"} <= code
    assert sorted(code - documented()) == []
    assert sorted(documented() - code) == []
