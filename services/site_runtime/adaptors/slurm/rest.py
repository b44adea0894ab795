"""slurmrestd access with a verified member token (docs/slurm-lab.md).

Every request first verifies the member's JWT (``metallo.identity.verify``) for
the binding subject, then sends it only as ``X-SLURM-USER-TOKEN`` with
``X-SLURM-USER-NAME`` equal to that subject.  No proxy, no redirect; plain
HTTP only for an explicitly allowed loopback slurmrestd.

Submission outcomes (docs/site-runtime.md, Codes):
* a job id → :class:`Submitted`;
* HTTP 500 naming one of :data:`DEFINITE_REFUSALS` (the job does not fit the
  Site's nodes, partition, time limit or GRES) → :class:`SlurmRefused`
  (``slurm-error-<n>``): nothing was created;
* 2050 (``ESLURM_ACCOUNTING_POLICY``, e.g. MaxSubmitJobs reached) →
  :class:`SlurmLimited`: turned away before creation, submit again later;
* connection refused → :class:`SlurmUnreachable`: nothing was sent;
* anything else (timeouts, resets, other 5xx, unreadable bodies) →
  :class:`SlurmUncertain`: the job may exist; never resubmit.

No exception message here carries the token, scheduler text or a response body.
"""

from __future__ import annotations

__all__ = ["SlurmAccessError", "SlurmJobRequeueable", "SlurmLimited", "SlurmRefused",
           "SlurmRest", "SlurmUncertain", "SlurmUnreachable", "Submitted"]

import asyncio
import errno
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from metallo.identity.verify import MemberCredential, MemberTokenVerifier
from site_runtime.adaptors.slurm.responses import (
    ResponseShapeError,
    error_numbers,
    parse_jobs,
    submitted_job_id,
)
from site_runtime.adaptors.slurm.rest_errors import (
    SlurmAccessError,
    SlurmJobRequeueable,
    SlurmLimited,
    SlurmRefused,
    SlurmUncertain,
    SlurmUnreachable,
)
from site_runtime.domain.slurm_arrays import parse_task_job_id
from site_runtime.domain.slurm_jobs import JobList, NativeIdentity, NativeJob, wire_job

API = "v0.0.38"
DB_API = "v0.0.38"  # served under /slurmdb/ by the openapi/dbv0.0.38 plugin
MAX_BODY_BYTES = 32 * 1024 * 1024

# slurmctld errors that say the job can never fit this Site (slurm_errno.h).
DEFINITE_REFUSALS = frozenset(
    {
        2000,  # ESLURM_INVALID_PARTITION_NAME
        2004,  # ESLURM_REQUESTED_NODES_NOT_IN_PARTITION
        2005,  # ESLURM_TOO_MANY_REQUESTED_CPUS
        2006,  # ESLURM_INVALID_NODE_COUNT
        2014,  # ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE
        2015,  # ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE
        2044,  # ESLURM_INVALID_TASK_MEMORY
        2051,  # ESLURM_INVALID_TIME_LIMIT
        2069,  # ESLURM_INVALID_CPU_COUNT
        2072,  # ESLURM_INVALID_GRES
    }
)
SUBMISSION_LIMITED = 2050  # ESLURM_ACCOUNTING_POLICY
UNKNOWN_JOB = 2017  # ESLURM_INVALID_JOB_ID
JOB_HELD = 2042  # ESLURM_JOB_HELD
DB_NOTHING_FOUND = 9003


@dataclass(frozen=True)
class Submitted:
    """A job slurmctld accepted."""

    job_id: str


@dataclass
class SlurmRest:
    """A small slurmrestd client for one Site (httpx, bounded time).

    ``base_url``: e.g. ``http://127.0.0.1:6820``; ``verifier`` checks the member
    token before every request; ``list_cache_seconds`` lets all Attempts observed
    in one cycle share one native list request.
    """

    base_url: str
    verifier: MemberTokenVerifier
    timeout_seconds: float = 10.0
    allow_insecure_loopback: bool = False
    verify_tls: Any = True
    list_cache_seconds: float = 2.0
    clock: Callable[[], float] = time.monotonic
    _client: httpx.AsyncClient | None = None
    _list_cache: tuple[float, JobList] | None = None
    _list_lock: asyncio.Lock | None = None
    list_requests: int = 0

    def __post_init__(self) -> None:
        url = httpx.URL(self.base_url)
        if url.scheme == "http":
            if not self.allow_insecure_loopback or url.host not in (
                "127.0.0.1",
                "localhost",
                "::1",
            ):
                raise ValueError(
                    "plain http to slurmrestd needs SLURM_REST_ALLOW_INSECURE_LOOPBACK and a loopback host"
                )
        elif url.scheme != "https":
            raise ValueError("the slurmrestd URL must be https (or loopback http)")

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self.timeout_seconds,
                follow_redirects=False,
                trust_env=False,
                verify=self.verify_tls,
                limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
            )
        return self._client

    async def close(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _headers(self, credential: MemberCredential, user: str) -> dict[str, str]:
        # Raises MemberTokenRejected / JwksUnavailable before anything is sent.
        verified = await self.verifier.verify(credential, site_username=user)
        return {
            "X-SLURM-USER-NAME": verified.site_username,
            "X-SLURM-USER-TOKEN": credential.bearer(),
            "Accept": "application/json",
        }

    async def submit(
        self,
        *,
        script: str,
        job: dict[str, Any],
        secret_environment: dict[str, str],
        credential: MemberCredential,
        user: str,
        before_post: Callable[[], None] | None = None,
    ) -> Submitted:
        """POST one job. ``secret_environment`` joins ``job.environment`` only in the body sent.

        ``before_post`` runs after token verification, immediately before the
        POST (the accepted-work deadline check).  Raises the outcomes listed in
        the module docstring.
        """
        headers = await self._headers(credential, user)
        if before_post is not None:
            before_post()
        body_job = wire_job(job)
        body_job["environment"] = {**job.get("environment", {}), **secret_environment}
        payload = json.dumps({"script": script, "job": body_job})
        try:
            response = await self._http().post(
                f"/slurm/{API}/job/submit",
                content=payload,
                headers={**headers, "Content-Type": "application/json"},
            )
        except httpx.ConnectError as error:
            if _refused(error):
                raise SlurmUnreachable("slurmrestd refused the connection") from None
            raise SlurmUncertain("the submission's connection failed") from None
        except httpx.HTTPError:
            raise SlurmUncertain("the submission's answer was lost") from None
        body = _json_or_none(response)
        # A held submission succeeds with ESLURM_JOB_HELD (2042) listed as an "error".
        numbers = [n for n in error_numbers(body) if n != JOB_HELD]
        if response.status_code == 200 and not numbers:
            job_id = submitted_job_id(body)
            if job_id is None:
                raise SlurmUncertain("the submission answer has no job id")
            return Submitted(job_id)
        if SUBMISSION_LIMITED in numbers:
            raise SlurmLimited("slurmctld is not taking more jobs now (2050)")
        definite = [n for n in numbers if n in DEFINITE_REFUSALS]
        if len(definite) == 1 and len(numbers) == 1:
            raise SlurmRefused(definite[0])
        raise SlurmUncertain(f"the submission answered HTTP {response.status_code}")

    async def list_jobs(self, *, credential: MemberCredential, user: str) -> JobList:
        """All jobs slurmctld knows, from one request shared for ``list_cache_seconds``."""
        if self._list_lock is None:
            self._list_lock = asyncio.Lock()
        async with self._list_lock:
            now = self.clock()
            if (
                self._list_cache is not None
                and now - self._list_cache[0] <= self.list_cache_seconds
            ):
                return self._list_cache[1]
            headers = await self._headers(credential, user)
            body = await self._get(f"/slurm/{API}/jobs", headers)
            self.list_requests += 1
            try:
                jobs = JobList(parse_jobs(body, "slurmctld"))
            except ResponseShapeError:
                raise SlurmUncertain("the job list has an unknown shape") from None
            self._list_cache = (self.clock(), jobs)
            return jobs

    async def job(
        self, job_id: str, *, credential: MemberCredential, user: str
    ) -> NativeJob | None:
        """The job as slurmctld shows it now (one request), None when it is unknown."""
        headers = await self._headers(credential, user)
        body = await self._get(f"/slurm/{API}/job/{int(job_id)}", headers, allow_missing=True)
        if body is None:
            return None
        try:
            jobs = [j for j in parse_jobs(body, "slurmctld") if j.job_id == str(int(job_id))]
        except ResponseShapeError:
            raise SlurmUncertain("the job answer has an unknown shape") from None
        return jobs[0] if jobs else None

    async def read(self, path: str, *, credential: MemberCredential, user: str) -> Any:
        """The JSON body of a GET of ``path`` (e.g. ``/slurm/v0.0.38/nodes``); raises
        SlurmUnreachable / SlurmUncertain as every request does."""
        return await self._get(path, await self._headers(credential, user))

    def forget_list(self) -> None:
        """Drop the cached job list (after a submission or cancellation changed it)."""
        self._list_cache = None

    async def accounting_job(
        self, job_id: str, *, credential: MemberCredential, user: str
    ) -> NativeJob | None:
        """The job as slurmdbd records it, None when accounting has no such job. An
        array task ``JOBID_TASK`` is asked for by that name (slurmdbd answers the
        task's own record, whose job id is the task's, not the array's)."""
        target = str(parse_task_job_id(job_id)) if "_" in job_id else str(int(job_id))
        headers = await self._headers(credential, user)
        body = await self._get(f"/slurmdb/{DB_API}/job/{target}", headers, allow_missing=True)
        if body is None:
            return None
        try:
            parsed = parse_jobs(body, "slurmdbd")
        except ResponseShapeError:
            raise SlurmUncertain("the accounting answer has an unknown shape") from None
        if "_" in target:
            jobs = [j for j in parsed if target in j.task_ids]
        else:
            jobs = [j for j in parsed if j.job_id == target]
        return jobs[0] if jobs else None

    async def find(
        self,
        identity: NativeIdentity,
        *,
        since_iso: str,
        credential: MemberCredential,
        user: str,
    ) -> list[NativeJob]:
        """Jobs carrying exactly ``identity``: slurmctld first, then slurmdbd (a job that has left slurmctld)."""
        self.forget_list()
        live = [
            j for j in await self.list_jobs(credential=credential, user=user) if identity.matches(j)
        ]
        if live:
            return live
        headers = await self._headers(credential, user)
        body = await self._get(
            f"/slurmdb/{DB_API}/jobs",
            headers,
            params={
                "job_name": identity.name,
                "account": identity.account,
                "start_time": since_iso,
            },
            allow_missing=True,
        )
        if body is None:
            return []
        try:
            return [j for j in parse_jobs(body, "slurmdbd") if identity.matches(j)]
        except ResponseShapeError:
            raise SlurmUncertain("the accounting answer has an unknown shape") from None

    async def release(self, job_id: str, *, credential: MemberCredential, user: str) -> None:
        """Release a job submitted held (idempotent: a job no longer held is left alone)."""
        headers = await self._headers(credential, user)
        try:
            response = await self._http().post(
                f"/slurm/{API}/job/{int(job_id)}",
                content=json.dumps({"hold": False}),
                headers={**headers, "Content-Type": "application/json"},
            )
        except httpx.ConnectError as error:
            if _refused(error):
                raise SlurmUnreachable("slurmrestd refused the connection") from None
            raise SlurmUncertain("the release's connection failed") from None
        except httpx.HTTPError:
            raise SlurmUncertain("the release's answer was lost") from None
        self.forget_list()
        numbers = error_numbers(_json_or_none(response))
        if response.status_code == 200 and not numbers:
            return
        if set(numbers) <= {2073, 2084, 2020}:  # not pending, finished, no state change
            return
        raise SlurmUncertain(f"the release answered HTTP {response.status_code}")

    async def cancel(self, job_id: str, *, credential: MemberCredential, user: str) -> str:
        """Cancel one job, or one array task named ``JOBID_TASK``: ``accepted``, or
        ``not-found`` when slurmctld does not know it."""
        target = str(parse_task_job_id(job_id)) if "_" in job_id else str(int(job_id))
        headers = await self._headers(credential, user)
        try:
            response = await self._http().delete(f"/slurm/{API}/job/{target}", headers=headers)
        except httpx.HTTPError:
            raise SlurmUncertain("the cancellation's answer was lost") from None
        self.forget_list()
        body = _json_or_none(response)
        numbers = error_numbers(body)
        if response.status_code == 200 and not numbers:
            return "accepted"
        if UNKNOWN_JOB in numbers:
            return "not-found"
        if 2021 in numbers or 2084 in numbers:  # ESLURM_ALREADY_DONE, ESLURM_JOB_FINISHED
            return "already-terminal"
        raise SlurmUncertain(f"the cancellation answered HTTP {response.status_code}")

    async def _get(
        self,
        path: str,
        headers: dict[str, str],
        *,
        params: dict[str, str] | None = None,
        allow_missing: bool = False,
    ) -> Any:
        try:
            response = await self._http().get(path, headers=headers, params=params)
        except httpx.ConnectError as error:
            if _refused(error):
                raise SlurmUnreachable("slurmrestd refused the connection") from None
            raise SlurmUncertain("slurmrestd cannot be reached") from None
        except httpx.HTTPError:
            raise SlurmUncertain("slurmrestd did not answer") from None
        body = _json_or_none(response)
        numbers = error_numbers(body)
        if allow_missing and (UNKNOWN_JOB in numbers or DB_NOTHING_FOUND in numbers):
            return None
        if response.status_code != 200 or body is None or numbers:
            raise SlurmUncertain(f"slurmrestd answered HTTP {response.status_code}")
        return body


def _json_or_none(response: httpx.Response) -> Any:
    if len(response.content) > MAX_BODY_BYTES:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _refused(error: httpx.ConnectError) -> bool:
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return True
        if isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED:
            return True
        cause = cause.__cause__ or cause.__context__
    return "refused" in str(error).lower()
