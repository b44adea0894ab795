"""The examples in docs/actions.md are valid actions.yaml files, one per action type."""

from __future__ import annotations

import re
from pathlib import Path

from workload_portfolio.application.actions_file import parse_actions_file
from workload_portfolio.domain.specification import normalise

DOC = Path(__file__).resolve().parents[2] / "docs" / "actions.md"


def full_examples() -> list[str]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return [b for b in blocks if b.startswith("version: 1")]


def test_documented_files_parse_and_cover_every_type():
    examples = full_examples()
    assert len(examples) >= 2
    types = set()
    for text in examples:
        f = parse_actions_file(text, source="docs/actions.md")
        for name, action in f.actions:
            types.add(action["type"])
            spec = normalise(name, action, repository_url="https://git.example.org/x.git", commit="a" * 40)
            assert spec["actionType"] == action["type"]
    assert types == {"slurm-job", "k8s-job", "k8s-deployment", "k8s-inferenceservice"}


def test_documented_environment_values_stay_text():
    example = next(e for e in full_examples() if "EPOCHS" in e)
    train = parse_actions_file(example).action("train")
    assert train["runtime"]["environment"]["EPOCHS"] == "3"


def test_actions_schema_is_valid_json_schema():
    import json

    import jsonschema

    schema = json.loads((DOC.parents[1] / "contracts" / "actions.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
