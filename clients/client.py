"""The typed Python client of the Hadar master.

>>> from clients import HadarClient, JobSpec, Program
>>> with HadarClient() as hadar:                                   # doctest: +SKIP
...     job = hadar.submit_job(JobSpec("resnet-a", Program.builtin("resnet"), iterations=2000))
...     print(job.id, job.state)

Every call carries a deadline (``timeout`` seconds, per call or per client). Calls that are
safe to repeat (reads, watches, submits with an idempotency key, cancels) are retried with
backoff while the master is unreachable; the others are not. Failures raise
:mod:`clients.errors` exceptions, never ``grpc.RpcError``.
"""

from __future__ import annotations

import getpass
import random
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import grpc

from clients import convert
from clients.config import ClientConfig, resolve
from clients.errors import HadarError, NotFound, Unavailable, from_rpc_error
from clients.retry import NO_RETRY, Clock, RetryPolicy, SystemClock, call_with_retry, is_retryable
from clients.types import (
    ClusterStatus,
    CreatedToken,
    Dependency,
    FairShareReport,
    Identity,
    Job,
    JobDescription,
    JobRecord,
    JobSpec,
    JobState,
    JobUpdate,
    LogChunk,
    Node,
    NotifyDefault,
    TerminalInput,
    TerminalOutput,
    TokenInfo,
    UsageGrouping,
    UsageReport,
    Workload,
)
from protos.hadar.v1 import common_pb2, hadar_pb2, hadar_pb2_grpc

T = TypeVar("T")

USER_METADATA_KEY = "x-hadar-user"
# UpdateJobRequest.dependencies' field for each dependency kind.
_DEPENDENCY_FIELDS = {"afterok": "after_ok", "afterany": "after_any", "afterfail": "after_fail"}
AUTHORIZATION_METADATA_KEY = "authorization"


def local_user() -> str:
    """The OS user running the client, sent as ``x-hadar-user`` for the master's dev mode."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


class HadarClient:
    """A connection to the master's Hadar service. Use as a context manager, or call close().

    ``address``, ``token`` and ``timeout`` default to the environment and the config file
    (see :mod:`clients.config`).
    """

    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        timeout: float | None = None,
        *,
        retry: RetryPolicy | None = None,
        user: str | None = None,
        config: ClientConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or resolve(address, token, timeout)
        self.address = self.config.address
        self.timeout = self.config.timeout_s
        self._retry = retry or RetryPolicy()
        self._clock = clock or SystemClock()
        self._rng = random.Random()
        metadata: list[tuple[str, str]] = [(USER_METADATA_KEY, user or local_user())]
        if self.config.token:
            metadata.append((AUTHORIZATION_METADATA_KEY, f"Bearer {self.config.token}"))
        self._metadata = tuple(metadata)
        self._channel = _open_channel(self.config)
        # The generated stub is untyped; _unary and _stream type what comes back.
        self._stub: Any = hadar_pb2_grpc.HadarStub(self._channel)  # type: ignore[no-untyped-call]

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> HadarClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- jobs ------------------------------------------------------------------------------

    def submit_job(
        self,
        spec: JobSpec,
        *,
        idempotency_key: str | None = None,
        hold: bool = False,
        timeout: float | None = None,
    ) -> Job:
        """Submits a job (with `hold`, stored held: it never starts until released). A
        fresh idempotency key is generated when none is given, so that retrying after a
        lost answer returns the same job rather than a duplicate."""
        key = idempotency_key or uuid.uuid4().hex
        request = hadar_pb2.SubmitJobRequest(
            spec=convert.spec_to_proto(spec), idempotency_key=key, hold=hold
        )
        response = self._unary(self._stub.SubmitJob, request, timeout, retry=True)
        return convert.job(response.job)

    def get_job(self, job_id: int, *, timeout: float | None = None) -> Job:
        request = hadar_pb2.GetJobRequest(job_id=job_id)
        return convert.job(self._unary(self._stub.GetJob, request, timeout, retry=True).job)

    def describe_job(self, job_id: int, *, timeout: float | None = None) -> JobDescription:
        """The job with its whole event history (why it waits, why it was preempted)."""
        request = hadar_pb2.GetJobRequest(job_id=job_id, include_events=True)
        response = self._unary(self._stub.GetJob, request, timeout, retry=True)
        return JobDescription(
            job=convert.job(response.job),
            events=tuple(convert.event(e) for e in response.events),
            notifications=tuple(convert.delivery(d) for d in response.notifications),
        )

    def iter_jobs(
        self,
        *,
        user: str | None = None,
        states: Iterable[JobState] = (),
        # The master's largest page: a long queue in as few round trips as it allows.
        page_size: int = 1000,
        array_job_id: int = 0,
        timeout: float | None = None,
    ) -> Iterator[Job]:
        """Jobs by ascending id, fetched page by page (each page has its own deadline);
        with `array_job_id`, only that array's elements. The next page is asked for as a
        page arrives, so the master reads it while this process converts the last one."""
        state_numbers = [convert.job_state_number(s) for s in states]

        def fetch(token: str) -> hadar_pb2.ListJobsResponse:
            request = hadar_pb2.ListJobsRequest(
                user=user or "",
                states=state_numbers,
                page_size=page_size,
                page_token=token,
                array_job_id=array_job_id,
            )
            response: hadar_pb2.ListJobsResponse = self._unary(
                self._stub.ListJobs, request, timeout, retry=True
            )
            return response

        response = fetch("")
        if not response.next_page_token:
            yield from (convert.job(message) for message in response.jobs)
            return
        # More than one page: one thread asks for each next page in the background.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hadar-pages") as ahead:
            while True:
                token = response.next_page_token
                following = ahead.submit(fetch, token) if token else None
                for message in response.jobs:
                    yield convert.job(message)
                if following is None:
                    return
                response = following.result()

    def list_jobs(
        self,
        *,
        user: str | None = None,
        states: Iterable[JobState] = (),
        array_job_id: int = 0,
        timeout: float | None = None,
    ) -> list[Job]:
        return list(
            self.iter_jobs(
                user=user, states=tuple(states), array_job_id=array_job_id, timeout=timeout
            )
        )

    def array_elements(self, array_job_id: int, *, timeout: float | None = None) -> list[Job]:
        """An array's elements by index; empty when `array_job_id` is no array's id."""
        elements = self.list_jobs(array_job_id=array_job_id, timeout=timeout)
        return sorted(elements, key=lambda j: j.spec.array_index or 0)

    def find_element(self, array_job_id: int, index: int, *, timeout: float | None = None) -> Job:
        """Element `index` of an array (`12_3`); NotFoundError when there is none."""
        for job in self.list_jobs(array_job_id=array_job_id, timeout=timeout):
            if job.spec.array_index == index:
                return job
        raise NotFound(f"job {array_job_id}_{index} not found: no such array element")

    def usage(
        self,
        *,
        user: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        by: UsageGrouping = UsageGrouping.USER,
        timeout: float | None = None,
    ) -> UsageReport:
        """GPU-seconds used in [since, until] (default: all of it, up to now), grouped by
        user, GPU type or UTC day; running jobs count up to now."""
        request = hadar_pb2.GetUsageRequest(user=user or "", by=convert.USAGE_GROUPING_NUMBERS[by])
        if since is not None:
            request.since.FromDatetime(since)
        if until is not None:
            request.until.FromDatetime(until)
        response = self._unary(self._stub.GetUsage, request, timeout, retry=True)
        return convert.usage_report(response, by)

    def fair_share(self, *, timeout: float | None = None) -> FairShareReport:
        """Each user's share, decayed usage, fair-share factor, GPUs held and quota, as the
        master's rounds see them (like Slurm's sshare)."""
        response = self._unary(
            self._stub.GetFairShare, hadar_pb2.GetFairShareRequest(), timeout, retry=True
        )
        return convert.fair_share_report(response)

    def iter_history(
        self,
        *,
        user: str | None = None,
        since: datetime | None = None,
        states: Iterable[JobState] = (),
        page_size: int = 500,
        timeout: float | None = None,
    ) -> Iterator[JobRecord]:
        """Ended jobs, newest first, with their run time and GPU-seconds, fetched page by
        page (each page has its own deadline)."""
        state_numbers = [convert.job_state_number(s) for s in states]
        token = ""
        while True:
            request = hadar_pb2.ListJobHistoryRequest(
                user=user or "", states=state_numbers, page_size=page_size, page_token=token
            )
            if since is not None:
                request.since.FromDatetime(since)
            response = self._unary(self._stub.ListJobHistory, request, timeout, retry=True)
            for entry in response.entries:
                yield convert.job_record(entry)
            token = response.next_page_token
            if not token:
                return

    def job_history(
        self,
        *,
        user: str | None = None,
        since: datetime | None = None,
        states: Iterable[JobState] = (),
        limit: int | None = None,
        timeout: float | None = None,
    ) -> list[JobRecord]:
        """Ended jobs, newest first (at most `limit`)."""
        out: list[JobRecord] = []
        page = min(limit, 500) if limit else 500
        for record in self.iter_history(
            user=user, since=since, states=tuple(states), page_size=page, timeout=timeout
        ):
            out.append(record)
            if limit is not None and len(out) >= limit:
                break
        return out

    # -- notifications -----------------------------------------------------------------

    def set_notify_default(
        self,
        url: str,
        *,
        on: Iterable[JobState] = (),
        user: str | None = None,
        timeout: float | None = None,
    ) -> NotifyDefault:
        """Sets the webhook told when any of the user's jobs that names none ends (the
        caller's own; an admin may name another user). `on`: end states, default
        COMPLETED, FAILED and TIMEOUT."""
        request = hadar_pb2.SetNotifyDefaultRequest(
            user=user or "", url=url, on=[convert.job_state_number(s) for s in on]
        )
        response = self._unary(self._stub.SetNotifyDefault, request, timeout, retry=True)
        return convert.notify_default(response)

    def notify_default(
        self, *, user: str | None = None, timeout: float | None = None
    ) -> NotifyDefault:
        request = hadar_pb2.GetNotifyDefaultRequest(user=user or "")
        response = self._unary(self._stub.GetNotifyDefault, request, timeout, retry=True)
        return convert.notify_default(response)

    def clear_notify_default(
        self, *, user: str | None = None, timeout: float | None = None
    ) -> NotifyDefault:
        request = hadar_pb2.ClearNotifyDefaultRequest(user=user or "")
        response = self._unary(self._stub.ClearNotifyDefault, request, timeout, retry=True)
        return convert.notify_default(response)

    def cancel_job(
        self,
        job_id: int,
        reason: str = "",
        *,
        whole_array: bool = False,
        timeout: float | None = None,
    ) -> Job:
        """Cancels a job (with `whole_array` and an array's id, all its elements);
        cancelling a job that already ended returns it unchanged. Retried on UNAVAILABLE
        because the master treats a repeated cancel as a no-op."""
        request = hadar_pb2.CancelJobRequest(job_id=job_id, reason=reason, whole_array=whole_array)
        return convert.job(self._unary(self._stub.CancelJob, request, timeout, retry=True).job)

    def hold_job(
        self,
        job_id: int,
        reason: str = "",
        *,
        whole_array: bool = False,
        timeout: float | None = None,
    ) -> Job:
        """Holds a waiting job back from scheduling until `release_job` (with `whole_array`
        and an array's id, every waiting element). Retried on UNAVAILABLE: holding a held
        job changes nothing."""
        request = hadar_pb2.HoldJobRequest(job_id=job_id, reason=reason, whole_array=whole_array)
        return convert.job(self._unary(self._stub.HoldJob, request, timeout, retry=True).job)

    def release_job(
        self, job_id: int, *, whole_array: bool = False, timeout: float | None = None
    ) -> Job:
        """Lets a held job be scheduled again (with `whole_array` and an array's id, every
        held element). Retried on UNAVAILABLE: releasing a job nobody holds changes
        nothing."""
        request = hadar_pb2.ReleaseJobRequest(job_id=job_id, whole_array=whole_array)
        return convert.job(self._unary(self._stub.ReleaseJob, request, timeout, retry=True).job)

    def requeue_job(
        self,
        job_id: int,
        reason: str = "",
        *,
        hold: bool = False,
        whole_array: bool = False,
        timeout: float | None = None,
    ) -> Job:
        """Puts a running job, or one that ended FAILED, CANCELLED or TIMEOUT, back in the
        queue: a managed job resumes from its last checkpoint (with `hold`, held until
        released). Retried on UNAVAILABLE: a job already waiting is returned unchanged."""
        request = hadar_pb2.RequeueJobRequest(
            job_id=job_id, reason=reason, hold=hold, whole_array=whole_array
        )
        return convert.job(self._unary(self._stub.RequeueJob, request, timeout, retry=True).job)

    def update_job(
        self,
        job_id: int,
        *,
        name: str | None = None,
        time_limit_s: int | None = None,
        priority: float | None = None,
        num_gpus: int | None = None,
        allowed_gpu_types: Sequence[str] | None = None,
        dependencies: Sequence[Dependency] | None = None,
        preemptible: bool | None = None,
        warning: tuple[int, int] | None = None,
        notify_url: str | None = None,
        notify_on: Sequence[JobState] | None = None,
        whole_array: bool = False,
        timeout: float | None = None,
    ) -> Job:
        """Changes the fields given (None leaves one as it is): an empty
        `allowed_gpu_types` means any type; `dependencies` replace the job's (empty: none);
        `warning` is (signal, seconds before the stop), signal 0 for none; an empty
        `notify_url` means the owner's default webhook; an empty `notify_on` means no
        notification at all. Retried on UNAVAILABLE: setting a value twice is setting it
        once."""
        request = hadar_pb2.UpdateJobRequest(job_id=job_id, whole_array=whole_array)
        if dependencies is not None:
            request.dependencies.SetInParent()
            for dependency in dependencies:
                field = _DEPENDENCY_FIELDS[dependency.kind]
                getattr(request.dependencies, field).append(dependency.job_id)
        if preemptible is not None:
            request.preemptible = preemptible
        if warning is not None:
            request.warning.signal, request.warning.before_s = warning
            request.warning.SetInParent()
        if notify_url is not None:
            request.notify_url = notify_url
        if notify_on is not None:
            request.notify_on.states.extend(convert.job_state_number(s) for s in notify_on)
            request.notify_on.none = not notify_on
            request.notify_on.SetInParent()
        if name is not None:
            request.name = name
        if time_limit_s is not None:
            request.time_limit_s = time_limit_s
        if priority is not None:
            request.priority = priority
        if num_gpus is not None:
            request.num_gpus = num_gpus
        if allowed_gpu_types is not None:
            request.allowed_gpu_types.types.extend(allowed_gpu_types)
            request.allowed_gpu_types.SetInParent()
        return convert.job(self._unary(self._stub.UpdateJob, request, timeout, retry=True).job)

    def watch_jobs(
        self,
        job_ids: Sequence[int] = (),
        *,
        user: str | None = None,
        include_initial: bool = True,
        timeout: float | None = None,
    ) -> Iterator[JobUpdate]:
        """Streams changes of the selected jobs until the caller stops iterating, or until
        ``timeout`` seconds pass (None: no deadline). If the master becomes unreachable the
        watch reconnects with backoff and starts with a fresh snapshot of every job."""
        # Batched: the master sends each wake-up's changes in one message.
        request = hadar_pb2.WatchJobsRequest(
            job_ids=list(job_ids), user=user or "", include_initial=include_initial, batch=True
        )
        resync = hadar_pb2.WatchJobsRequest(
            job_ids=list(job_ids), user=user or "", include_initial=True, batch=True
        )

        def convert_update(
            update: hadar_pb2.JobUpdate | hadar_pb2.WatchJobsResponse,
        ) -> JobUpdate:
            event = convert.event(update.event) if update.HasField("event") else None
            return JobUpdate(job=convert.job(update.job), event=event)

        def updates() -> Iterator[JobUpdate]:
            messages = self._stream(self._stub.WatchJobs, request, resync, timeout, _same)
            try:
                for message in messages:
                    if message.HasField("job"):
                        # A master that sends one change a message (it predates `batch`).
                        yield convert_update(message)
                    for update in message.updates:
                        yield convert_update(update)
            finally:
                messages.close()

        return updates()

    def stream_logs(
        self,
        job_id: int,
        *,
        follow: bool = False,
        tail_lines: int = 0,
        rank: int | None = None,
        attempt: int | None = None,
        timeout: float | None = None,
    ) -> Iterator[LogChunk]:
        """A job's output in chunks: every attempt in order (only ``attempt``, counted from
        1, when given), each opened by a chunk without data that names it. Without
        ``follow`` the stream ends at the current end of the logs and has the client's
        deadline. With ``follow`` it follows the job: it waits for a pending job, starts
        with the current attempt, goes on with each later one (after a preemption or
        migration), ends once the job has ended, and has no deadline unless given."""
        request = hadar_pb2.StreamLogsRequest(job_id=job_id, follow=follow, tail_lines=tail_lines)
        if rank is not None:
            request.rank = rank
        if attempt is not None:
            request.attempt = attempt
        limit = timeout if (timeout is not None or follow) else self.timeout
        # Resuming a broken log stream would repeat output, so only the opening is retried.
        return self._stream(self._stub.StreamLogs, request, None, limit, convert.log_chunk)

    def attach_job(
        self, job_id: int, inputs: Iterable[TerminalInput], *, size: tuple[int, int] | None = None
    ) -> Iterator[TerminalOutput]:
        """The terminal of an interactive job of the caller's that runs: `inputs` (bytes
        typed, window sizes) are sent as they come, from gRPC's own thread, and what the
        terminal shows comes back, the last output carrying the command's exit. `size` is
        the window size (rows, columns) it opens with. No deadline and no retry: a session
        cannot be resumed, and the worker hangs it up once this stream goes away."""

        def requests() -> Iterator[common_pb2.TerminalInput]:
            yield _terminal_input(TerminalInput(size=size), job_id)
            for item in inputs:
                yield _terminal_input(item, 0)

        call = self._stub.AttachJob(requests(), metadata=self._metadata)
        try:
            for message in call:
                yield TerminalOutput(message.data, message.exited, message.exit_code)
                if message.exited:
                    return
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        finally:
            call.cancel()

    # -- cluster ---------------------------------------------------------------------------

    def list_nodes(self, *, timeout: float | None = None) -> list[Node]:
        response = self._unary(
            self._stub.ListNodes, hadar_pb2.ListNodesRequest(), timeout, retry=True
        )
        return [convert.node(n) for n in response.nodes]

    def drain_node(self, node: str, reason: str = "", *, timeout: float | None = None) -> Node:
        request = hadar_pb2.DrainNodeRequest(node=node, reason=reason)
        return convert.node(self._unary(self._stub.DrainNode, request, timeout).node)

    def resume_node(self, node: str, *, timeout: float | None = None) -> Node:
        request = hadar_pb2.ResumeNodeRequest(node=node)
        return convert.node(self._unary(self._stub.ResumeNode, request, timeout).node)

    def cluster_status(self, *, timeout: float | None = None) -> ClusterStatus:
        response = self._unary(
            self._stub.GetClusterStatus, hadar_pb2.GetClusterStatusRequest(), timeout, retry=True
        )
        return convert.cluster_status(response)

    def list_workloads(self, *, timeout: float | None = None) -> list[Workload]:
        response = self._unary(
            self._stub.ListWorkloads, hadar_pb2.ListWorkloadsRequest(), timeout, retry=True
        )
        return [convert.workload(w) for w in response.workloads]

    # -- identity and tokens ---------------------------------------------------------------

    def whoami(self, *, timeout: float | None = None) -> Identity:
        response = self._unary(self._stub.WhoAmI, hadar_pb2.WhoAmIRequest(), timeout, retry=True)
        return convert.identity(response)

    def create_token(
        self,
        user: str,
        *,
        admin: bool = False,
        description: str = "",
        timeout: float | None = None,
    ) -> CreatedToken:
        request = hadar_pb2.CreateTokenRequest(user=user, admin=admin, description=description)
        return convert.created_token(self._unary(self._stub.CreateToken, request, timeout))

    def list_tokens(
        self, *, user: str | None = None, timeout: float | None = None
    ) -> list[TokenInfo]:
        request = hadar_pb2.ListTokensRequest(user=user or "")
        response = self._unary(self._stub.ListTokens, request, timeout, retry=True)
        return [convert.token_info(t) for t in response.tokens]

    def revoke_token(self, token_id: str, *, timeout: float | None = None) -> TokenInfo:
        request = hadar_pb2.RevokeTokenRequest(id=token_id)
        return convert.token_info(self._unary(self._stub.RevokeToken, request, timeout).info)

    # -- plumbing --------------------------------------------------------------------------

    def _unary(
        self, method: Any, request: Any, timeout: float | None, *, retry: bool = False
    ) -> Any:
        def attempt(remaining: float) -> Any:
            return method(request, timeout=remaining, metadata=self._metadata)

        try:
            return call_with_retry(
                attempt,
                timeout_s=timeout if timeout is not None else self.timeout,
                policy=self._retry if retry else NO_RETRY,
                clock=self._clock,
                rng=self._rng,
            )
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    def _stream(
        self,
        method: Any,
        request: Any,
        resync: Any | None,
        timeout: float | None,
        convert_one: Callable[[Any], T],
    ) -> Generator[T, None, None]:
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        failures = 0
        received_any = False
        current = request
        while True:
            remaining = None if deadline is None else max(deadline - self._clock.monotonic(), 0.001)
            call = method(current, timeout=remaining, metadata=self._metadata)
            try:
                for message in call:
                    received_any = True
                    failures = 0
                    yield convert_one(message)
                return
            except grpc.RpcError as error:
                retryable = is_retryable(error) and (not received_any or resync is not None)
                failures += 1
                if not retryable or failures >= self._retry.attempts:
                    raise from_rpc_error(error) from None
                pause = self._retry.backoff(failures - 1, self._rng)
                if deadline is not None and self._clock.monotonic() + pause >= deadline:
                    raise from_rpc_error(error) from None
                self._clock.sleep(pause)
                if received_any and resync is not None:
                    current = resync
            finally:
                call.cancel()


def _same(message: T) -> T:
    return message


def _terminal_input(item: TerminalInput, job_id: int) -> common_pb2.TerminalInput:
    message = common_pb2.TerminalInput(job_id=job_id, data=item.data)
    if item.size is not None:
        message.size.rows, message.size.cols = item.size
    return message


def _open_channel(config: ClientConfig) -> grpc.Channel:
    options = [("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_permit_without_calls", 0)]
    if config.ca_file is None:
        return grpc.insecure_channel(config.address, options=options)
    roots = _read(config.ca_file, "the CA bundle")
    if config.cert_file is None or config.key_file is None:
        credentials = grpc.ssl_channel_credentials(roots)
    else:
        credentials = grpc.ssl_channel_credentials(
            roots,
            private_key=_read(config.key_file, "the client key"),
            certificate_chain=_read(config.cert_file, "the client certificate"),
        )
    return grpc.secure_channel(config.address, credentials, options=options)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise Unavailable(f"cannot read {what} {path}: {exc.strerror}") from exc


__all__ = ["HadarClient", "HadarError", "local_user"]
