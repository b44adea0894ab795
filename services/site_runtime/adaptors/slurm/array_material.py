"""Each array task's own material on the shared filesystem (docs/site-runtime.md, Arrays).

Before a group's arrays are released the Runtime writes, for every task and stage,
the file ``<workspace root>/<prefix>-<group>.material/<stage>.<index>``: the
variables that differ task to task (:attr:`~site_runtime.domain.slurm_arrays.ArrayStageRequest.task_environment`)
and, for the two staging stages, the child's own just-in-time repository grant
(``METALLO_GIT_USERNAME`` / ``METALLO_GIT_PASSWORD``; issued through
:class:`~.grants.StageGrants`, so it is journaled by id on the child's stage and
released with the child, as a single chain's is). The task's loader
(``array_scripts.py``) reads its file by ``$SLURM_ARRAY_TASK_ID`` and removes it.

The directory is mode 0700 and every file 0600, written whole (a temporary name,
then a rename). Until a task has started (its file
is still there) :class:`~.array_grant_renewal.ArrayGrantRenewal` may replace the file
the same way with a renewed grant (fsynced before the rename, the directory after).
Both belong to the binding's Unix user, the only one whose tasks
may read them: a Runtime running as root gives them to that user (it already
removes member workspaces at cleanup); a Runtime running as the member itself
writes them as its own. A path that is a symlink or not a directory is refused
(``workspace-unavailable``). No token is written anywhere else.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from site_runtime.adaptors.slurm.array_grant_book import ArrayGrantBook
from site_runtime.adaptors.slurm.grants import StageGrants
from site_runtime.adaptors.slurm.journal import SlurmJournal
from site_runtime.application.ports import Deferred
from site_runtime.domain.grant_renewal import expiry_epoch
from site_runtime.domain.slurm_array_start import material_bytes, material_directory, material_file
from site_runtime.domain.slurm_arrays import ArrayMember
from site_runtime.domain.slurm_stages import STAGES, STAGING_STAGES


def _owner(user: str) -> tuple[int, int] | None:
    """(uid, gid) to give the files to when this process may (root), else None."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise Deferred("workspace-unavailable", "the member's Unix user is unknown here") from None
    return entry.pw_uid, entry.pw_gid


class ArrayMaterial:
    """Write and remove the per-task material files of array groups."""

    def __init__(
        self,
        journal: SlurmJournal,
        grants: StageGrants,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.journal = journal
        self.grants = grants
        self.book = ArrayGrantBook(journal)
        self.clock = clock

    def directory(self, record: Mapping[str, object], group_id: str) -> Path:
        """The group's material directory (from a member's saved record)."""
        return Path(
            material_directory(str(record["workspace_root"]), str(record["prefix"]), group_id)
        )

    async def write(
        self,
        members: Sequence[ArrayMember],
        group_id: str,
        environments: Mapping[str, Mapping[int, Mapping[str, str]]],
    ) -> None:
        """Issue each child's staging grants and write every task's files.

        ``environments`` is stage → task index → that task's own variables. Raises
        Deferred (``workspace-unavailable``, or the grant's deferral) and
        :class:`~.grants.GrantRefused` (the child's stage is refused with its code).
        """
        record = members[0].record
        owner = _owner(str(record["binding"]["user"]))  # type: ignore[index]
        folder = self._folder(self.directory(record, group_id), owner)
        for index, member in enumerate(members):
            att = self.journal.attempt(member.attempt_id)
            assert att is not None
            for stage in STAGES:
                env = dict(environments[stage][index])
                if stage in STAGING_STAGES:
                    grant = await self.grants.issue(att, stage)
                    expires = expiry_epoch(grant.expires_at)
                    self.book.issued(att.attempt_id, stage, grant.grant_id, self.clock(), expires)
                    env["METALLO_GIT_USERNAME"] = grant.username
                    env["METALLO_GIT_PASSWORD"] = grant.token
                self._write(folder / material_file(stage, index), material_bytes(env), owner)

    async def discard(self, members: Sequence[ArrayMember], group_id: str) -> None:
        """Release every child's staging grants and remove the group's files (the
        group was refused: none of its tasks will run)."""
        for member in members:
            for stage in STAGING_STAGES:
                await self.grants.release(member.attempt_id, stage)
        folder = self.directory(members[0].record, group_id)
        for index in range(len(members)):
            self.remove_task(folder, index)
        with contextlib.suppress(OSError):
            folder.rmdir()

    def remove_task(self, folder: Path, index: int) -> None:
        """Remove task ``index``'s files (those its tasks did not read: a cancelled or
        never-started task's grant must not stay on disk). Deferred when one cannot
        be removed now."""
        names = [material_file(stage, index) for stage in STAGES]
        for name in [*names, *(f".{n}.tmp" for n in names)]:  # and an interrupted write's
            path = folder / name
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError:
                raise Deferred(
                    "workspace-unavailable", "an array task's material cannot be removed"
                ) from None
        with contextlib.suppress(OSError):
            folder.rmdir()  # only once it is empty: the last child's cleanup

    def task_path(self, record: Mapping[str, object], stage: str) -> Path:
        """The material file of an assigned child's task (``record["array"]``)."""
        array: Mapping[str, object] = record["array"]  # type: ignore[assignment]
        folder = self.directory(record, str(array["group_id"]))
        return folder / material_file(stage, int(array["index"]))  # type: ignore[call-overload]

    def read_task(self, path: Path) -> tuple[bytes, tuple[int, int] | None] | None:
        """A task's file and the owner to give its replacement (None: keep this
        process's); None when the file is gone (the task has started). Deferred when
        the file cannot be read or is not a regular file."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError:
            raise Deferred(
                "workspace-unavailable", "an array task's material is unreadable"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise Deferred("workspace-unavailable", "an array task's material is not a file")
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        except OSError:
            raise Deferred(
                "workspace-unavailable", "an array task's material is unreadable"
            ) from None
        finally:
            os.close(fd)
        owner = (info.st_uid, info.st_gid) if os.geteuid() == 0 else None
        return b"".join(chunks), owner

    def replace_task(self, path: Path, data: bytes, owner: tuple[int, int] | None) -> None:
        """Replace a task's file atomically (same owner, mode 0600; Deferred on failure)."""
        self._write(path, data, owner, durable=True)

    def _folder(self, folder: Path, owner: tuple[int, int] | None) -> Path:
        try:
            info = os.lstat(folder)
        except FileNotFoundError:
            try:
                folder.mkdir(mode=0o700)
                if owner is not None:
                    os.chown(folder, *owner)
            except OSError:
                raise Deferred(
                    "workspace-unavailable", "the array's material directory cannot be made"
                ) from None
            return folder
        except OSError:
            raise Deferred(
                "workspace-unavailable", "the material directory is unreadable"
            ) from None
        expected = owner[0] if owner is not None else os.geteuid()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != expected:
            raise Deferred("workspace-unavailable", "the array's material path is not its own")
        return folder

    def _write(
        self, path: Path, data: bytes, owner: tuple[int, int] | None, durable: bool = False
    ) -> None:
        temporary = path.with_name(f".{path.name}.tmp")
        try:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if owner is not None:
                    os.fchown(fd, *owner)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, path)
            if durable:
                folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
        except OSError:
            raise Deferred(
                "workspace-unavailable", "an array task's material cannot be written"
            ) from None
