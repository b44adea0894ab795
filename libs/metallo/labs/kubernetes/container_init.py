"""Container start inside a private mount namespace (run by the kubelet through ``unshare``).

``unshare --mount --propagation private python -m metallo.labs.kubernetes.container_init
SPEC_FD STATUS_FD`` reads the container's JSON spec from SPEC_FD, bind-mounts each
volume directory at its exact ``mountPath`` (read-only when asked) and a private
``/tmp``, drops to the container's user (never root: uid 0 is refused), changes to
``workingDir`` and ``execve``s the argv with exactly the container's environment, no
shell. STATUS_FD is close-on-exec: it reaches EOF without data when the exec
happened; on failure it carries the reason and the process exits 128 (the kubelet
reports ``StartError``).

Spec keys: argv (list), env (dict), cwd, uid, gid, groups (list), mounts (list of
{source, target, read_only}), tmp (a host directory mounted on /tmp).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import warnings  # noqa: F401 - os.execvpe imports it; after setuid the interpreter's files may be unreadable

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, flags: int) -> None:
    if _libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _bind(source: str, target: str, read_only: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    elif not os.path.exists(target):
        os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
        open(target, "a").close()  # noqa: SIM115 - a mount point for a single file
    _mount(source, target, MS_BIND | MS_REC)
    if read_only:
        _mount(source, target, MS_BIND | MS_REMOUNT | MS_RDONLY)


def main(argv: list[str]) -> int:
    spec_fd, status_fd = int(argv[1]), int(argv[2])
    os.set_inheritable(status_fd, False)
    with os.fdopen(spec_fd, "rb") as fh:
        spec = json.loads(fh.read())
    status = os.fdopen(status_fd, "w")
    try:
        uid, gid = int(spec["uid"]), int(spec["gid"])
        if uid == 0:
            raise PermissionError("the lab never runs containers as root (runAsUser 0)")
        if spec.get("tmp"):
            _bind(spec["tmp"], "/tmp", False)
        for m in spec.get("mounts", []):
            _bind(m["source"], m["target"], bool(m.get("read_only")))
        os.setgroups([int(g) for g in spec.get("groups", [])])
        os.setgid(gid)
        os.setuid(uid)
        os.umask(0o022)
        os.chdir(spec.get("cwd") or "/")
        args = spec["argv"]
        env = {str(k): str(v) for k, v in spec["env"].items()}
        os.execvpe(args[0], args, env)
    except Exception as e:  # noqa: BLE001 - every failure before exec is a StartError
        status.write(f"{type(e).__name__}: {e}")
        status.flush()
        return 128
    return 128  # not reached: execvpe replaced the process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
