"""Why a member token is not used: refused (:class:`MemberTokenRejected`) or not yet
checkable (:class:`JwksUnavailable`). No message here contains the token."""

from __future__ import annotations


class MemberTokenRejected(Exception):
    """The member token is not acceptable; nothing native may be requested with it.

    ``reason`` is one of: ``malformed``, ``algorithm``, ``unknown-key``,
    ``signature``, ``issuer``, ``authorized-party``, ``type``, ``scope``,
    ``subject``, ``site-username``, ``username-conflict``, ``audience``,
    ``expired``, ``not-yet-valid``, ``validity-too-long``.
    ``code`` is always ``member-token-rejected``.  The message never quotes the token.
    """

    code = "member-token-rejected"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class JwksUnavailable(Exception):
    """The issuer's keys cannot be fetched and no usable saved keys exist (retry later).

    ``code`` is ``member-token-keys-unavailable`` (a deferral, not a refusal).
    """

    code = "member-token-keys-unavailable"
