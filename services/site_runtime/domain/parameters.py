"""A collection child's parameters as the command's environment (docs/actions.md, Collections).

The planned specification of a collection child carries ``parameters`` (name →
value). Every executor hands them to the command only as environment variables
``METALLO_PARAM_<NAME>`` — never substituted into a command or script — after
checking them again here (the rules of :mod:`metallo.parameters`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from metallo import parameters


def parameter_environment(spec: Mapping[str, Any], refusal: Callable[[str, str], Exception]) -> dict[str, str]:
    """``METALLO_PARAM_<NAME>`` → value for ``spec["parameters"]`` ({} when absent).

    Raises ``refusal("invalid-material", message)`` for values that are not a
    mapping of checked names to bounded text.
    """
    raw = spec.get("parameters") or {}
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) for k in raw):
        raise refusal("invalid-material", "spec.parameters must map names to text")
    try:
        return parameters.environment(dict(raw))
    except parameters.ParameterError as e:
        raise refusal("invalid-material", f"spec.parameters: {e}"[:500]) from None
