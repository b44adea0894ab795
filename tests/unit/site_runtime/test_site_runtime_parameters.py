"""A collection child's parameters reach the command only as METALLO_PARAM_<NAME> variables."""

from __future__ import annotations

import pytest

from site_runtime.adaptors.slurm.material import Refusal
from site_runtime.domain.local_batch import InvalidMaterial, parse_job
from site_runtime.domain.parameters import parameter_environment
from tests.unit.site_runtime.test_site_runtime_local_batch import payload


def test_parameters_become_environment_variables_and_never_touch_the_command():
    job = parse_job(payload(command={"shell": "echo \"$METALLO_PARAM_LR\""}, parameters={"lr": "0.1; rm -rf /"}))
    assert job.environment == {"A": "1", "METALLO_PARAM_LR": "0.1; rm -rf /"}
    assert job.steps[-1].to_argv()[-1] == "echo \"$METALLO_PARAM_LR\""  # the script is the author's, unchanged


@pytest.mark.parametrize("bad", [{"bad-name": "1"}, {"x": "a\x00b"}, {"x": 1}, {"x": "v" * 1025}, ["x"]])
def test_bad_parameters_are_refused_as_invalid_material(bad):
    with pytest.raises(InvalidMaterial) as e:
        parse_job(payload(parameters=bad))
    assert e.value.code == "invalid-material"
    with pytest.raises(Refusal):
        parameter_environment({"parameters": bad}, Refusal)


def test_no_parameters_no_variables():
    assert parameter_environment({}, Refusal) == {}
    assert "METALLO_PARAM_" not in " ".join(parse_job(payload()).environment)
