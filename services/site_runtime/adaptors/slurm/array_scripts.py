"""The script of an array task (docs/site-runtime.md, Arrays; ADR 0032).

An array's one script serves every task, so what differs per task cannot be in
its environment: each task first loads its own material file, then runs the
single-chain stage script of the Attempts' script version, byte for byte, as the
rest of the same bash process (its first line becomes a comment).

The loader (constant text, no value interpolated):

* opens ``$METALLO_ARRAY_MATERIAL/$METALLO_STAGE.$SLURM_ARRAY_TASK_ID`` and refuses
  anything but a regular file owned by the task's own user (exit 70,
  ``workspace-unavailable``);
* exports each NUL-ended ``NAME=value`` entry as one word (``export "$entry"``), so
  no value is ever parsed as shell; a name that is not an identifier, or one bash
  reads at start-up (:data:`~site_runtime.domain.slurm_array_start.LOADER_REFUSED_NAMES`),
  stops the task;
* removes the file once read: a staging task's file holds its repository grant,
  which then lives only in that task's environment, as a single chain's does.

Versioned like the stage scripts: a change is a new loader version beside the old.
"""

from __future__ import annotations

from site_runtime.adaptors.slurm.scripts import scripts_for
from site_runtime.domain.slurm_array_start import LOADER_REFUSED_NAMES

_REFUSED = " | ".join(sorted(LOADER_REFUSED_NAMES))

_LOADER_V1 = (
    r"""#!/bin/bash
# Metallo array task, loader version 1: this task's own values come from its material file.
metallo_say() { printf '%s metallo %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${METALLO_STAGE:-?}" "$*"; }
metallo_material="${METALLO_ARRAY_MATERIAL:-}/${METALLO_STAGE:-}.${SLURM_ARRAY_TASK_ID:-}"
if [ -z "${METALLO_ARRAY_MATERIAL:-}" ] || [ -z "${SLURM_ARRAY_TASK_ID:-}" ] ||
  [ -L "$metallo_material" ] || [ ! -f "$metallo_material" ] || [ ! -O "$metallo_material" ]; then
  metallo_say "no material for array task ${SLURM_ARRAY_TASK_ID:-?}"
  exit 70
fi
while IFS= read -r -d '' metallo_entry; do
  case "$metallo_entry" in
    *=*) ;;
    *) metallo_say "array task material entry refused"; exit 70 ;;
  esac
  case "${metallo_entry%%=*}" in
    '' | [!A-Za-z_]* | *[!A-Za-z0-9_]* | """
    + _REFUSED
    + r""")
      metallo_say "array task material entry refused"; exit 70 ;;
  esac
  export "$metallo_entry" || exit 70
done <"$metallo_material"
rm -f -- "$metallo_material"
unset metallo_material metallo_entry
unset -f metallo_say
"""
)

#: loader version -> its exact text. Never edit an existing version's text.
LOADERS = {1: _LOADER_V1}
LOADER_VERSION = 1


def array_scripts(script_version: int, loader_version: int = LOADER_VERSION) -> dict[str, str]:
    """stage → the array script: the loader, then the stage script of
    ``script_version`` (raises UnknownScriptVersion for one this Runtime lacks)."""
    loader = LOADERS[loader_version]
    return {stage: loader + text for stage, text in scripts_for(script_version).items()}
