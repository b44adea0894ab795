"""The deferral catalogue (seed 001: every deferral names a catalogued code).

The catalogue itself lives in ``contracts/deferrals.json``; the adaptor loads it
and hands this class the codes.
"""

from __future__ import annotations

from collections.abc import Mapping

from site_coordination.domain.errors import Invalid


class DeferralCatalogue:
    """Known deferral codes and their fixed member-facing descriptions."""

    def __init__(self, descriptions: Mapping[str, str]) -> None:
        self._descriptions = dict(descriptions)

    def check(self, code: str) -> str:
        """Return ``code`` when catalogued; raise :class:`Invalid` ``unknown-deferral-code``."""
        if code not in self._descriptions:
            raise Invalid("unknown-deferral-code", "the deferral code is not in the catalogue")
        return code

    def description(self, code: str) -> str:
        """The fixed text explaining ``code`` (KeyError when unknown)."""
        return self._descriptions[code]

    @property
    def codes(self) -> frozenset[str]:
        """Every catalogued code."""
        return frozenset(self._descriptions)
