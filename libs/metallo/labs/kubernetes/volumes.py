"""Volumes: each PVC a private host directory, Secret/ConfigMap files, emptyDir, /tmp.

Host layout under the lab state directory (``volumes/`` and ``pods/`` are mode 0700
root, so no member reaches another's files from the host side; a container reaches
its own volumes only through the bind mounts at its ``mountPath``):

- PVC ``<ns>/<claim>``: ``volumes/<ns>/<claim>-<pvc uid>/``. On first mount it is
  given to the Pod's ``runAsUser`` (group ``fsGroup`` or the user's group), mode 0700
  (2770 with ``fsGroup``). Removed when the PVC is removed (reclaim policy Delete).
- Secret/ConfigMap volume: ``pods/<pod uid>/volumes/<name>/<key>`` (``defaultMode`` or
  0644, group ``fsGroup``), written when the Pod starts.
- emptyDir: ``pods/<pod uid>/volumes/<name>/`` (mode 0777, as Kubernetes makes it).
- ``/tmp`` of every container: ``pods/<pod uid>/tmp`` (1777).

:class:`PvcController` binds each new PVC at once (``phase: Bound``, capacity as
requested, ``volumeName: pvc-<uid>``), adds ``kubernetes.io/pvc-protection`` and
removes that finalizer once no unfinished Pod of the namespace uses the claim.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
from pathlib import Path

from metallo.labs.kubernetes.containers import CONFIGMAPS, SECRETS, ConfigError, home_of
from metallo.labs.kubernetes.resources import PODS, PVCS
from metallo.labs.kubernetes.store import Store
from metallo.labs.kubernetes.watches import WatchEvent

PROTECTION = "kubernetes.io/pvc-protection"


class VolumeError(Exception):
    """A volume the lab cannot provide (shown as ``CreateContainerConfigError``)."""


def pvc_dir(volumes_root: Path, pvc: dict) -> Path:
    meta = pvc["metadata"]
    return volumes_root / meta["namespace"] / f"{meta['name']}-{meta['uid']}"


def _write_files(target: Path, data: dict[str, bytes], items: list[dict] | None, mode: int,
                 gid: int | None) -> None:
    target.mkdir(parents=True, exist_ok=True)
    os.chmod(target, 0o755)
    chosen = {i["key"]: i.get("path", i["key"]) for i in items} if items else {k: k for k in data}
    for key, rel in chosen.items():
        if key not in data:
            raise ConfigError(f"couldn't find key {key} in the volume source")
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[key])
        os.chmod(path, mode)
        if gid is not None:
            os.chown(path, 0, gid)


def prepare_volumes(store: Store, pod: dict, pod_dir: Path, volumes_root: Path) -> dict:
    """Make every volume's host directory; {"tmp": dir, "by_container": {name: [mount]}}.
    Raises :class:`ConfigError` for a missing Secret/ConfigMap, :class:`VolumeError` for
    an unsupported volume or a PVC that is not bound."""
    ns = pod["metadata"]["namespace"]
    spec = pod["spec"]
    psc = spec.get("securityContext") or {}
    fs_group = psc.get("fsGroup")
    pod_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(pod_dir, 0o700)
    volumes_root.mkdir(parents=True, exist_ok=True)
    os.chmod(volumes_root, 0o700)
    tmp = pod_dir / "tmp"
    tmp.mkdir(exist_ok=True)
    os.chmod(tmp, 0o1777)
    sources: dict[str, Path] = {}
    for v in spec.get("volumes") or []:
        name = v["name"]
        local = pod_dir / "volumes" / name
        if "persistentVolumeClaim" in v:
            claim = v["persistentVolumeClaim"]["claimName"]
            pvc = store.peek(PVCS, ns, claim)
            if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
                raise VolumeError(f'persistentvolumeclaim "{claim}" is not bound')
            sources[name] = pvc_dir(volumes_root, pvc)
        elif "secret" in v or "configMap" in v:
            is_secret = "secret" in v
            src = v["secret" if is_secret else "configMap"]
            ref = src.get("secretName" if is_secret else "name", "")
            obj = store.peek(SECRETS if is_secret else CONFIGMAPS, ns, ref)
            if obj is None:
                if src.get("optional"):
                    obj = {}
                else:
                    raise ConfigError(f'{"secret" if is_secret else "configmap"} "{ref}" not found')
            data = ({k: base64.b64decode(x) for k, x in (obj.get("data") or {}).items()} if is_secret
                    else {k: str(x).encode() for k, x in (obj.get("data") or {}).items()})
            _write_files(local, data, src.get("items"), int(src.get("defaultMode", 0o644)), fs_group)
            sources[name] = local
        elif "emptyDir" in v:
            local.mkdir(parents=True, exist_ok=True)
            os.chmod(local, 0o777)
            sources[name] = local
        else:
            raise VolumeError(f"volume {name!r}: the lab supports persistentVolumeClaim, secret, "
                              "configMap and emptyDir volumes only")
    by_container: dict[str, list[dict]] = {}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        sc = {**psc, **(c.get("securityContext") or {})}
        mounts = []
        for m in c.get("volumeMounts") or []:
            source = sources.get(m["name"])
            if source is None:
                raise VolumeError(f"volumeMount {m['name']!r} names no volume of the Pod")
            if m.get("subPath"):
                source = source / m["subPath"]
                source.mkdir(parents=True, exist_ok=True)
            if source.is_relative_to(volumes_root):
                _claim_ownership(source, sc.get("runAsUser"), fs_group)
            mounts.append({"source": str(source), "target": m["mountPath"],
                           "read_only": bool(m.get("readOnly"))})
        by_container[c["name"]] = mounts
    return {"tmp": tmp, "by_container": by_container}


def _claim_ownership(path: Path, uid: int | None, fs_group: int | None) -> None:
    st = path.stat()
    if uid is None or int(uid) == 0:
        return
    if st.st_uid == 0:  # a fresh volume: it becomes the first user's, privately
        gid = int(fs_group) if fs_group is not None else home_of(int(uid))[1]
        os.chown(path, int(uid), gid)
        os.chmod(path, 0o2770 if fs_group is not None else 0o700)
    elif fs_group is not None and st.st_gid != int(fs_group):
        os.chown(path, -1, int(fs_group))


class PvcController:
    """Binds PVCs and releases their protection finalizer (see the module docstring)."""

    def __init__(self, store: Store, volumes_root: Path) -> None:
        self.store = store
        self.volumes_root = volumes_root
        self._dirty = asyncio.Event()
        store.listeners.append(self._on_event)

    def _on_event(self, ev: WatchEvent) -> None:
        if ev.rtype is PVCS or ev.rtype is PODS:
            self._dirty.set()
        if ev.rtype is PVCS and ev.type == "DELETED":
            shutil.rmtree(pvc_dir(self.volumes_root, ev.obj), ignore_errors=True)

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            self.sync()

    def sync(self) -> None:
        for pvc in list(self.store.iter(PVCS)):
            meta = pvc["metadata"]
            ns, name = meta["namespace"], meta["name"]
            if (pvc.get("status") or {}).get("phase") != "Bound" and not meta.get("deletionTimestamp"):
                self._bind(pvc)
            elif meta.get("deletionTimestamp") and PROTECTION in (meta.get("finalizers") or []) \
                    and not self._in_use(ns, name):
                self.store.mutate(PVCS, ns, name, lambda o: o["metadata"].__setitem__(
                    "finalizers", [f for f in o["metadata"].get("finalizers", []) if f != PROTECTION]))

    def _bind(self, pvc: dict) -> None:
        meta = pvc["metadata"]
        path = pvc_dir(self.volumes_root, pvc)
        self.volumes_root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.volumes_root, 0o700)
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        spec = pvc.get("spec") or {}
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")

        def bind(o: dict) -> None:
            fins = o["metadata"].setdefault("finalizers", [])
            if PROTECTION not in fins:
                fins.append(PROTECTION)
            o["spec"]["volumeName"] = f"pvc-{meta['uid']}"
            o["spec"].setdefault("storageClassName", "standard")
            o["spec"].setdefault("volumeMode", "Filesystem")
            o["status"] = {"phase": "Bound", "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                           "capacity": {"storage": storage}}
        self.store.mutate(PVCS, meta["namespace"], meta["name"], bind)

    def _in_use(self, ns: str, claim: str) -> bool:
        for pod in self.store.iter(PODS, ns):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for v in (pod.get("spec") or {}).get("volumes") or []:
                if (v.get("persistentVolumeClaim") or {}).get("claimName") == claim:
                    return True
        return False
