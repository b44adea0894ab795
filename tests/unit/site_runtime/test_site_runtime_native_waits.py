"""The native-wait catalogue (seed 001): every Slurm ``Reason`` and Kubernetes waiting
reason maps to a catalogued code with fixed member-facing text."""

from __future__ import annotations

import pytest

from site_runtime.domain.native_waits import (
    NATIVE_WAITS,
    SLURM_OTHER,
    kubernetes_wait,
    slurm_wait,
    text,
)


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("Resources", "slurm-resources"),
        ("Priority", "slurm-priority"),
        ("Dependency", "slurm-dependency"),
        ("DependencyNeverSatisfied", "slurm-dependency-never-satisfied"),
        ("BeginTime", "slurm-begin-time"),
        ("JobHeldUser", "slurm-held-user"),
        ("JobHeldAdmin", "slurm-held-admin"),
        ("ReqNodeNotAvail", "slurm-nodes-unavailable"),
        ("ReqNodeNotAvail, UnavailableNodes:node1", "slurm-nodes-unavailable"),
        ("NodeDown", "slurm-nodes-unavailable"),
        ("PartitionConfig", "slurm-partition-limit"),
        ("PartitionTimeLimit", "slurm-partition-limit"),
        ("PartitionNodeLimit", "slurm-partition-limit"),
        ("PartitionDown", "slurm-partition-unavailable"),
        ("PartitionInactive", "slurm-partition-unavailable"),
        ("QOSMaxJobsPerUserLimit", "slurm-qos-limit"),
        ("QOSGrpCpuLimit", "slurm-qos-limit"),
        ("QOSMaxWallDurationPerJobLimit", "slurm-qos-limit"),
        ("AssocGrpCpuLimit", "slurm-association-limit"),
        ("AssocMaxJobsLimit", "slurm-association-limit"),
        ("AssocGrpJobsLimit", "slurm-association-limit"),
        ("Reservation", "slurm-reservation"),
        ("Licenses", "slurm-licenses"),
        ("  Resources  ", "slurm-resources"),
        # Not waiting at all.
        ("None", None),
        ("", None),
        (None, None),
        # Anything else is the fallback: the scheduler's own text is never passed on.
        ("QOSNotAllowed", SLURM_OTHER),  # a QOS reason that is not a limit
        ("launch failed requeued held", SLURM_OTHER),
        ("Cleaning", SLURM_OTHER),
        ("x" * 5000, SLURM_OTHER),
        ("resources", SLURM_OTHER),  # Slurm's reasons are case-sensitive
    ],
)
def test_a_slurm_reason_maps_to_its_code(reason, code):
    assert slurm_wait(reason) == code


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("Unschedulable", "kubernetes-unschedulable"),
        ("ErrImagePull", "kubernetes-image-pull"),
        ("ImagePullBackOff", "kubernetes-image-pull"),
        ("InvalidImageName", "kubernetes-image-pull"),
        ("CreateContainerConfigError", "kubernetes-container-config"),
        ("CreateContainerError", "kubernetes-container-config"),
        ("CrashLoopBackOff", "kubernetes-crash-loop"),
        ("ErrImageNeverPull", "kubernetes-image-pull"),
        ("RunContainerError", "kubernetes-container-config"),
        ("ContainerCreating", None),
        ("", None),
        (None, None),
    ],
)
def test_a_kubernetes_reason_maps_to_its_code(reason, code):
    assert kubernetes_wait(reason) == code


def test_every_code_the_maps_give_is_catalogued():
    from site_runtime.domain import native_waits

    given = set(native_waits._SLURM_EXACT.values()) | set(native_waits.KUBERNETES_REASONS.values())
    given |= {code for _, code in native_waits._SLURM_PREFIXES}
    # A requeue is read from the restart count, not from a Reason.
    assert given | {SLURM_OTHER, native_waits.SLURM_REQUEUED} == set(native_waits.NATIVE_WAIT_CODES)


def test_every_code_has_a_fixed_text_and_a_codes_shape():
    import re

    for code, words in NATIVE_WAITS.items():
        assert re.fullmatch(r"(slurm|kubernetes)-[a-z-]+", code), code
        assert words and words == text(code) and len(words) <= 80
    with pytest.raises(KeyError):
        text("Resources")  # a raw reason is not a code
