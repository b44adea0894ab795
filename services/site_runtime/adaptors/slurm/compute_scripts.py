"""The compute stage's script texts, by version (scripts.py lists what each version changed).

Constant bash text: values reach it only through the job's environment. Versions 4
and 5 are derived from version 1's text by exact replacements (each asserted to match
once), so everything they do not change stays byte-identical.
"""

from __future__ import annotations

COMPUTE_V1 = r"""cd -- "$ws/repo" 2>/dev/null || { say "no checkout"; exit 70; }
cd -- "$METALLO_WORKDIR" 2>/dev/null || { say "no working directory"; exit 70; }
status=0
for ((i = 0; i < METALLO_CMD_COUNT; i++)); do
  shell_var="METALLO_CMD_${i}_SHELL"
  if [ -n "${!shell_var+set}" ]; then
    /bin/sh -c "${!shell_var}"
    status=$?
  else
    argc_var="METALLO_CMD_${i}_ARGC"
    argv=()
    for ((j = 0; j < ${!argc_var}; j++)); do
      arg_var="METALLO_CMD_${i}_ARG_${j}"
      argv+=("${!arg_var}")
    done
    "${argv[@]}"
    status=$?
  fi
  if [ "$status" != 0 ]; then say "command $i exited with $status"; exit "$status"; fi
done
exit 0
"""

# Version 4's compute is version 3's with every command run as a job step (derived, so
# the rest stays byte-identical).
_RUN_SHELL = '    /bin/sh -c "${!shell_var}"\n'
_RUN_ARGV = '    "${argv[@]}"\n'
assert COMPUTE_V1.count(_RUN_SHELL) == 1 and COMPUTE_V1.count(_RUN_ARGV) == 1
COMPUTE_V4 = COMPUTE_V1.replace(
    _RUN_SHELL, '    srun --quiet --ntasks=1 -- /bin/sh -c "${!shell_var}"\n'
).replace(_RUN_ARGV, '    srun --quiet --ntasks=1 -- "${argv[@]}"\n')

# Version 5's compute is version 4's with the log appended to by each step itself and a
# death by a signal named (derived, so the rest stays byte-identical).
_LOG_SETUP_V5 = r"""# The job's log, when a regular file: reopened for appending, and appended to by each
# step's command itself (Slurm's I/O forwarding drops the last lines of a killed step).
log=""
if [ -f "/proc/$$/fd/1" ]; then
  log="$(readlink -f "/proc/$$/fd/1")" && exec >>"$log" 2>&1 || log=""
fi
# Metallo's own lines start on a line of their own, after a command's last words.
on_a_new_line() {
  if [ -n "$log" ] && [ -n "$(tail -c 1 -- "$log" 2>/dev/null)" ]; then printf '\n'; fi
}
status=0
"""
# srun's own words (its standard error) are kept to tell a signal from an exit; what
# the step forwards on standard output goes on to the log (fd 3).
_STEP_SHELL_V5 = r"""    { said="$(srun --quiet --ntasks=1 -- /bin/sh -c \
      'if [ -n "$0" ]; then exec >>"$0" 2>&1; fi; exec /bin/sh -c "$1"' \
      "$log" "${!shell_var}" 2>&1 >&3 3>&-)"; } 3>&1
"""
_STEP_ARGV_V5 = r"""    { said="$(srun --quiet --ntasks=1 -- /bin/sh -c \
      'if [ -n "$0" ]; then exec >>"$0" 2>&1; fi; exec "$@"' \
      "$log" "${argv[@]}" 2>&1 >&3 3>&-)"; } 3>&1
"""
_STEP_STATUS_V5 = r"""    status=$?
    if [ -n "$said" ]; then on_a_new_line; printf '%s\n' "$said"; fi
"""
_FAILED_V4 = (
    '  if [ "$status" != 0 ]; then say "command $i exited with $status"; exit "$status"; fi\n'
)
# srun says "task 0: Exited with exit code N" of an exit, the signal's name otherwise.
_FAILED_V5 = r"""  if [ "$status" != 0 ]; then
    on_a_new_line
    signal=$((status - 128))
    if [ "$status" -gt 128 ] && [[ "$said" != *"Exited with exit code"* ]] &&
      name="$(kill -l "$signal" 2>/dev/null)"; then
      say "command $i was killed by signal $signal (SIG$name)"
    else
      say "command $i exited with $status"
    fi
    exit "$status"
  fi
"""
_STEP_V4_SHELL = '    srun --quiet --ntasks=1 -- /bin/sh -c "${!shell_var}"\n    status=$?\n'
_STEP_V4_ARGV = '    srun --quiet --ntasks=1 -- "${argv[@]}"\n    status=$?\n'
assert COMPUTE_V4.count(_STEP_V4_SHELL) == 1 and COMPUTE_V4.count(_STEP_V4_ARGV) == 1
assert COMPUTE_V4.count(_FAILED_V4) == 1 and COMPUTE_V4.count("status=0\n") == 1
COMPUTE_V5 = (
    COMPUTE_V4.replace("status=0\n", _LOG_SETUP_V5)
    .replace(_STEP_V4_SHELL, _STEP_SHELL_V5 + _STEP_STATUS_V5)
    .replace(_STEP_V4_ARGV, _STEP_ARGV_V5 + _STEP_STATUS_V5)
    .replace(_FAILED_V4, _FAILED_V5)
)
