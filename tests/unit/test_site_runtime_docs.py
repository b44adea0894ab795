"""The operator's guide explains every code the Runtime can produce (deferrals,
refusals, failure codes) and keeps the Slurm executor's section."""

from __future__ import annotations

from pathlib import Path

from site_runtime.domain.deferrals import DEFERRALS
from site_runtime.domain.local_batch import FAILURES, REFUSALS

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "site-runtime.md"


def test_every_code_is_explained_in_the_guide():
    text = GUIDE.read_text(encoding="utf-8")
    missing = [c for c in [*DEFERRALS, *REFUSALS, *FAILURES] if f"`{c}`" not in text]
    assert missing == []


def test_the_guide_keeps_its_sections():
    text = GUIDE.read_text(encoding="utf-8")
    for heading in (
        "## Running it",
        "## Journals",
        "## Recovery",
        "## Local executor",
        "## Codes",
        "## Slurm executor",
    ):
        assert heading in text
    assert "slurm-lab.md" in text


def test_every_kubernetes_code_is_explained_in_the_guide():
    from site_runtime.domain.kubernetes_batch import REFUSALS as K8S_REFUSALS
    from site_runtime.domain.kubernetes_observation import FAILURES as K8S_FAILURES
    from site_runtime.domain.native_waits import KUBERNETES_REASONS

    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## Kubernetes executor"):]
    codes = [*K8S_REFUSALS, *K8S_FAILURES, *KUBERNETES_REASONS.values()]
    missing = [c for c in codes if f"`{c}`" not in text]
    assert missing == []
    assert "k8s-lab.md" in section and "KUBERNETES_KUBECONFIG" in section
