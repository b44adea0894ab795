"""Checks on Git names an author or caller supplies (branches, commits, paths)."""

from __future__ import annotations

import re

COMMIT = re.compile(r"^[0-9a-f]{40}$")
_BAD_BRANCH_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def branch_problem(name: str) -> str | None:
    """Why ``name`` is not an acceptable branch name (git check-ref-format rules), or None."""
    if not name or len(name) > 255:
        return "a branch name has 1 to 255 characters"
    if name.startswith(("-", "/")) or name.endswith(("/", ".", ".lock")):
        return "a branch name may not start with '-' or '/' nor end with '/', '.' or '.lock'"
    if ".." in name or "@{" in name or "//" in name or name == "@":
        return "a branch name may not contain '..', '@{' or '//'"
    if _BAD_BRANCH_CHARS.search(name):
        return "a branch name may not contain spaces, control characters or any of ~ ^ : ? * [ \\"
    if any(part.startswith(".") for part in name.split("/")):
        return "no part of a branch name may start with '.'"
    return None


def relative_path_problem(path: str) -> str | None:
    """Why ``path`` is not a safe path inside a checkout, or None.

    Refuses absolute paths, '..' segments, backslashes and control characters, so
    a path can never leave the Attempt's workspace.
    """
    if path.startswith("/"):
        return "must be relative to the checkout (no leading '/')"
    if "\\" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "may not contain backslashes or control characters"
    if any(seg == ".." for seg in path.split("/")):
        return "may not contain '..'"
    return None
