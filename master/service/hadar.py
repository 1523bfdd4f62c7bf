"""hadar.v1.Hadar: what people and programs call. Decode, call the domain, encode."""

# ruff: noqa: N802  (method names are the RPC names from the .proto)
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import grpc
import structlog
from google.protobuf.timestamp_pb2 import Timestamp

from master import fields
from master.errors import InvalidArgumentError, PermissionDeniedError
from master.jobs.control import SpecChanges
from master.jobs.holds import WAITING_STATES
from master.jobs.lifecycle import retry_limit
from master.jobs.logs import LogRelay
from master.jobs.manager import Caller
from master.jobs.notifications import check_url
from master.jobs.privacy import JobPrivacy
from master.jobs.terminals import TerminalRelay
from master.jobs.usage import Grouping, gpu_seconds, run_seconds, summarize
from master.jobs.validation import DEPENDENCY_FIELDS, notify_states
from master.jobs.workloads import workload_info
from master.process.metrics import MasterMetrics
from master.rounds.snapshot import fair_share_report, with_measurements
from master.service.access import current_caller
from master.service.codec import (
    JOB_STATE_FROM_PB,
    JOB_STATE_TO_PB,
    ListedJobs,
    delivery_to_pb,
    event_to_pb,
    hide_private,
    job_to_pb,
    node_to_pb,
    notify_default_to_pb,
    timestamp,
    token_to_pb,
)
from master.service.components import Components
from master.service.feed import EventFeed
from master.service.status import streaming, unary
from protos.hadar.v1 import common_pb2, hadar_pb2, hadar_pb2_grpc
from store import UnitOfWork
from store.domain import Job, Task, UsageRecord
from store.states import GpuHealth, JobState, NodeState, is_terminal

log = structlog.get_logger(__name__)

# Sizes of the store's columns (store/models.py).
USER_MAX = 64
NODE_MAX = 255
DESCRIPTION_MAX = 256
TOKEN_ID_MAX = 64
# Reasons people give end up in job events and node records.
REASON_MAX = 1024
DEFAULT_PAGE = 100
MAX_PAGE = 1000
WATCH_POLL_S = 1.0
# Changes in one batched WatchJobs message at most (a job is about a kilobyte).
WATCH_BATCH_MAX = 500


def _metrics(servicer: HadarServicer) -> MasterMetrics:
    return servicer.parts.metrics


def page(page_size: int, page_token: str) -> tuple[int, int]:
    """A listing's page: its size (the default when 0) and the id its token names (0: the
    first page); INVALID_ARGUMENT for a size over the maximum or a token not handed out."""
    size = page_size or DEFAULT_PAGE
    if size > MAX_PAGE:
        raise InvalidArgumentError("page_size", f"must be at most {MAX_PAGE}")
    if not page_token:
        return size, 0
    if not (page_token.isascii() and page_token.isdigit()):
        raise InvalidArgumentError("page_token", "not a token from a previous response")
    return size, fields.int64(int(page_token), "page_token")


def _update_dependencies(request: hadar_pb2.UpdateJobRequest) -> tuple[tuple[str, int], ...] | None:
    """The (kind, job id) pairs an update gives, in the order of their kinds; None when it
    leaves the dependencies as they are."""
    if not request.HasField("dependencies"):
        return None
    given = request.dependencies
    return tuple(
        (kind, job_id)
        for kind, attr in DEPENDENCY_FIELDS.items()
        for job_id in getattr(given, attr)
    )


def _run_seconds(uow: UnitOfWork, job_ids: list[int]) -> dict[int, float]:
    """Each job's run time so far, summed over its attempts (jobs that never ran left
    out)."""
    records: dict[int, list[UsageRecord]] = {}
    for record in uow.usage.for_jobs(job_ids):
        records.setdefault(record.job_id, []).append(record)
    now = datetime.now(UTC)
    return {job_id: run_seconds(mine, now) for job_id, mine in records.items()}


class HadarServicer(hadar_pb2_grpc.HadarServicer):
    def __init__(self, parts: Components) -> None:
        self.parts = parts
        self._privacy = JobPrivacy.of(parts.settings)
        self._feed = EventFeed(parts.tx, parts.changes)
        self._listed = ListedJobs()

    # -- helpers -------------------------------------------------------------------------

    def _admin(self, what: str) -> Caller:
        caller = current_caller()
        if not caller.admin:
            raise PermissionDeniedError(f"only admins may {what}")
        return caller

    def _job_pb(
        self, uow: UnitOfWork, job: Job, caller: Caller, tasks: list[Task] | None = None
    ) -> common_pb2.Job:
        if tasks is None:
            tasks = uow.tasks.active_for_job(job.id) if job.state is JobState.RUNNING else []
        return self._shown(job_to_pb(job, tasks, reason=self._reason(job)), job, caller)

    def _listed_pb(self, job: Job, caller: Caller, tasks: list[Task] | None) -> common_pb2.Job:
        """A job as `caller` may see it in a listing (with its active tasks, if any); a
        message shared between listings when it has no tasks, which the response copies."""
        if tasks:
            return self._shown(job_to_pb(job, tasks), job, caller)
        return self._listed.pb_expected(
            job,
            hidden=not self._privacy.may_read(caller, job.user),
            expected_start=self._expected_start(job),
            reason=self._reason(job),
        )

    def _reason(self, job: Job) -> str:
        """Why the job waits as the last round found, else its stored reason."""
        return self.parts.rounds.reasons.of(job)

    def _expected_start(self, job: Job) -> datetime | None:
        """The newest forecast's start time for a waiting job that nobody holds; public
        like the rest of the queue."""
        forecaster = self.parts.rounds.forecaster
        if forecaster is None or job.held_by or job.state not in WAITING_STATES:
            return None
        return forecaster.expected_start(job.id)

    def _shown(self, out: common_pb2.Job, job: Job, caller: Caller) -> common_pb2.Job:
        """The job as `caller` may see it: whole for its readers, as a queue shows it for
        everyone else."""
        return out if self._privacy.may_read(caller, job.user) else hide_private(out)

    def _throughputs(self, job: Job) -> list[tuple[str, float, str]]:
        def read(uow: UnitOfWork) -> list[tuple[str, float, str]]:
            model = with_measurements(self.parts.base_model, uow.throughput.all())
            types = sorted({g.type for n in uow.nodes.all() for g in n.gpus})
            out: list[tuple[str, float, str]] = []
            for gpu_type in types:
                if job.spec.allowed_gpu_types and gpu_type not in job.spec.allowed_gpu_types:
                    continue
                estimate = model.estimate(job.spec.job_type, gpu_type, job.spec.num_gpus)
                out.append((gpu_type, estimate.iterations_per_s, estimate.source))
            return out

        return self.parts.tx.read(read)

    # -- jobs ------------------------------------------------------------------------------

    @unary(_metrics)
    def SubmitJob(
        self, request: hadar_pb2.SubmitJobRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.SubmitJobResponse:
        caller = current_caller()
        if not request.HasField("spec"):
            raise InvalidArgumentError("spec", "a job spec is required")
        job, _ = self.parts.jobs.submit(
            caller, request.spec, request.idempotency_key, hold=request.hold
        )
        return hadar_pb2.SubmitJobResponse(job=job_to_pb(job))

    @unary(_metrics)
    def GetJob(
        self, request: hadar_pb2.GetJobRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.GetJobResponse:
        caller = current_caller()
        job, tasks = self.parts.jobs.get(fields.job_id(request.job_id))
        out = self._shown(
            job_to_pb(job, tasks, self._throughputs(job), reason=self._reason(job)), job, caller
        )
        expected = self._expected_start(job)
        if expected is not None:
            out.expected_start.CopyFrom(timestamp(expected))
        out.retry_limit = retry_limit(job.spec, self.parts.settings.max_retries)
        records = self.parts.tx.read(lambda uow: uow.usage.for_jobs([job.id]))
        now = datetime.now(UTC)
        out.run_seconds = run_seconds(records, now)
        out.limit_run_seconds = max(0.0, out.run_seconds - job.requeued_run_s)
        out.gpu_seconds = gpu_seconds(records, now)
        events = self.parts.jobs.events(job.id) if request.include_events else []
        deliveries = (
            self.parts.tx.read(lambda uow: uow.notifications.for_job(job.id))
            if not out.private_hidden
            else []
        )
        return hadar_pb2.GetJobResponse(
            job=out,
            events=[event_to_pb(e) for e in events],
            notifications=[delivery_to_pb(d) for d in deliveries],
        )

    @unary(_metrics)
    def ListJobs(
        self, request: hadar_pb2.ListJobsRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.ListJobsResponse:
        size, after = page(request.page_size, request.page_token)
        user = fields.text(request.user, "user", USER_MAX)
        states = []
        for i, state in enumerate(request.states):
            if state not in JOB_STATE_FROM_PB:
                raise InvalidArgumentError(f"states[{i}]", f"unknown job state {state}")
            states.append(JOB_STATE_FROM_PB[state])
        array_job_id = fields.int64(request.array_job_id, "array_job_id")
        caller = current_caller()

        def read(uow: UnitOfWork) -> hadar_pb2.ListJobsResponse:
            jobs = uow.jobs.listing(
                user=user,
                states=states,
                after_id=after,
                limit=size + 1,
                array_job_id=array_job_id,
            )
            more = len(jobs) > size
            jobs = jobs[:size]
            placed = uow.tasks.active_for_jobs([j.id for j in jobs if j.state is JobState.RUNNING])
            response = hadar_pb2.ListJobsResponse(
                jobs=[self._listed_pb(j, caller, placed.get(j.id)) for j in jobs],
                next_page_token=str(jobs[-1].id) if more and jobs else "",
            )
            # The run time a job's time limit counts, as GetJob gives it: a queue and
            # `hctl show` agree on how long a job ran. Set on the response's own copies:
            # the listed messages are shared between listings.
            ran = _run_seconds(uow, [j.id for j in jobs if j.started_at is not None])
            for message in response.jobs:
                if message.id in ran:
                    message.run_seconds = ran[message.id]
            return response

        return self.parts.tx.read(read)

    @unary(_metrics)
    def CancelJob(
        self, request: hadar_pb2.CancelJobRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.CancelJobResponse:
        caller = current_caller()
        job = self.parts.jobs.cancel(
            caller,
            fields.job_id(request.job_id),
            fields.label(request.reason, "reason", REASON_MAX).strip(),
            whole_array=request.whole_array,
        )
        return hadar_pb2.CancelJobResponse(job=job_to_pb(job))

    @unary(_metrics)
    def HoldJob(
        self, request: hadar_pb2.HoldJobRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.HoldJobResponse:
        job = self.parts.control.hold(
            current_caller(),
            fields.job_id(request.job_id),
            fields.label(request.reason, "reason", REASON_MAX).strip(),
            whole_array=request.whole_array,
        )
        return hadar_pb2.HoldJobResponse(job=job_to_pb(job))

    @unary(_metrics)
    def ReleaseJob(
        self, request: hadar_pb2.ReleaseJobRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.ReleaseJobResponse:
        job = self.parts.control.release(
            current_caller(), fields.job_id(request.job_id), whole_array=request.whole_array
        )
        return hadar_pb2.ReleaseJobResponse(job=job_to_pb(job))

    @unary(_metrics)
    def RequeueJob(
        self, request: hadar_pb2.RequeueJobRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.RequeueJobResponse:
        job = self.parts.control.requeue(
            current_caller(),
            fields.job_id(request.job_id),
            fields.label(request.reason, "reason", REASON_MAX).strip(),
            hold=request.hold,
            whole_array=request.whole_array,
        )
        return hadar_pb2.RequeueJobResponse(job=job_to_pb(job))

    @unary(_metrics)
    def UpdateJob(
        self, request: hadar_pb2.UpdateJobRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.UpdateJobResponse:
        changes = SpecChanges(
            name=request.name if request.HasField("name") else None,
            time_limit_s=request.time_limit_s if request.HasField("time_limit_s") else None,
            priority=request.priority if request.HasField("priority") else None,
            num_gpus=request.num_gpus if request.HasField("num_gpus") else None,
            allowed_gpu_types=(
                tuple(t.strip() for t in request.allowed_gpu_types.types)
                if request.HasField("allowed_gpu_types")
                else None
            ),
            dependencies=_update_dependencies(request),
            preemptible=request.preemptible if request.HasField("preemptible") else None,
            warning=(
                (request.warning.signal, request.warning.before_s)
                if request.HasField("warning")
                else None
            ),
            notify_url=request.notify_url if request.HasField("notify_url") else None,
            notify_on=(
                notify_states(request.notify_on.states, "notify_on")
                if request.HasField("notify_on")
                else None
            ),
            no_notify=request.notify_on.none if request.HasField("notify_on") else None,
        )
        job = self.parts.control.update(
            current_caller(),
            fields.job_id(request.job_id),
            changes,
            whole_array=request.whole_array,
        )
        return hadar_pb2.UpdateJobResponse(job=job_to_pb(job))

    @streaming(_metrics)
    def WatchJobs(
        self, request: hadar_pb2.WatchJobsRequest, context: grpc.ServicerContext
    ) -> Iterator[hadar_pb2.WatchJobsResponse]:
        wanted = {fields.job_id(j) for j in request.job_ids}
        caller = current_caller()
        changes = self.parts.changes
        generation = changes.generation

        def jobs_now(uow: UnitOfWork) -> list[common_pb2.Job]:
            if wanted:
                jobs = [uow.jobs.get(job_id) for job_id in sorted(wanted)]
            else:
                jobs = uow.jobs.list_unfinished()
            return [
                self._job_pb(uow, j, caller)
                for j in jobs
                if not request.user or j.user == request.user
            ]

        # The cursor before the look: a change between the two comes twice, none is lost.
        cursor = self._feed.cursor()
        first = self.parts.tx.read(jobs_now) if request.include_initial else []
        yield from _watch_messages([(job, None) for job in first], request.batch)
        woke = float("-inf")
        while context.is_active() and not changes.closed:
            # The feed reads new events at most once per its spacing, so waking more often
            # finds nothing new: under a hundred submissions a second each watcher would
            # otherwise wake for every one of them.
            pause = woke + self._feed.spacing - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            generation = changes.wait(generation, WATCH_POLL_S)
            if changes.closed:
                break  # the master stops: its store may be gone already
            woke = time.monotonic()
            entries = self._feed.after(cursor)
            if entries is None:
                # Further behind than the feed keeps (a reader slower than the changes):
                # its jobs as they are now, as after a reconnect, and on from there.
                cursor = self._feed.cursor()
                now = self.parts.tx.read(jobs_now)
                yield from _watch_messages([(job, None) for job in now], request.batch)
                continue
            found: list[tuple[common_pb2.Job, common_pb2.JobEvent | None]] = []
            for entry in entries:
                cursor = entry.position
                if wanted and entry.job.id not in wanted:
                    continue
                if request.user and entry.user != request.user:
                    continue
                job = entry.job
                if not self._privacy.may_read(caller, entry.user):
                    # The feed's copy is every watcher's: this one's is hidden.
                    job = common_pb2.Job()
                    job.CopyFrom(entry.job)
                    hide_private(job)
                found.append((job, entry.event))
            yield from _watch_messages(found, request.batch)

    @streaming(_metrics)
    def StreamLogs(
        self, request: hadar_pb2.StreamLogsRequest, context: grpc.ServicerContext
    ) -> Iterator[common_pb2.LogChunk]:
        job_id = fields.job_id(request.job_id)
        caller = current_caller()
        owner = self.parts.jobs.get(job_id)[0].user
        if not self._privacy.may_read(caller, owner):
            raise PermissionDeniedError(
                f"job {job_id} belongs to {owner}: only its owner and admins may read its output"
            )
        yield from LogRelay(self.parts.tx, self.parts.workers, self.parts.changes).stream(
            job_id,
            follow=request.follow,
            tail_lines=request.tail_lines,
            rank=request.rank if request.HasField("rank") else None,
            attempt=request.attempt if request.HasField("attempt") else None,
            active=context.is_active,
        )

    @streaming(_metrics)
    def AttachJob(
        self, request_iterator: Iterator[common_pb2.TerminalInput], context: grpc.ServicerContext
    ) -> Iterator[common_pb2.TerminalOutput]:
        first = next(request_iterator, None)
        if first is None:
            raise InvalidArgumentError("job_id", "the first message must name the job")
        job_id = fields.job_id(first.job_id)
        caller = current_caller()
        owner = self.parts.jobs.get(job_id)[0].user
        if caller.user != owner:
            # Typing into a shell is acting as its user: no admin may, as no admin may log
            # in as another user; an admin ends a session with CancelJob.
            raise PermissionDeniedError(
                f"job {job_id} belongs to {owner}: only its owner may attach to its terminal"
                + (f"; end it with `hctl cancel {job_id}`" if caller.admin else "")
            )
        yield from TerminalRelay(self.parts.tx, self.parts.workers).attach(
            job_id, first, request_iterator, context.is_active, context.add_callback
        )

    # -- nodes and the cluster -------------------------------------------------------------

    @unary(_metrics)
    def ListNodes(
        self, request: hadar_pb2.ListNodesRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.ListNodesResponse:
        nodes, tasks = self.parts.registry.nodes()
        jobs_by_gpu: dict[tuple[str, int], list[int]] = {}
        for task in tasks:
            for index in task.gpu_indices:
                jobs_by_gpu.setdefault((task.node, index), []).append(task.job_id)
        return hadar_pb2.ListNodesResponse(nodes=[node_to_pb(n, jobs_by_gpu) for n in nodes])

    @unary(_metrics)
    def DrainNode(
        self, request: hadar_pb2.DrainNodeRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.DrainNodeResponse:
        self._admin("drain nodes")
        node = self.parts.registry.drain(
            fields.text(request.node, "node", NODE_MAX),
            fields.label(request.reason, "reason", REASON_MAX).strip(),
        )
        return hadar_pb2.DrainNodeResponse(node=node_to_pb(node, {}))

    @unary(_metrics)
    def ResumeNode(
        self, request: hadar_pb2.ResumeNodeRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.ResumeNodeResponse:
        self._admin("resume nodes")
        node = self.parts.registry.resume(fields.text(request.node, "node", NODE_MAX))
        return hadar_pb2.ResumeNodeResponse(node=node_to_pb(node, {}))

    @unary(_metrics)
    def GetClusterStatus(
        self, request: hadar_pb2.GetClusterStatusRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.GetClusterStatusResponse:

        def read(uow: UnitOfWork) -> hadar_pb2.GetClusterStatusResponse:
            nodes = uow.nodes.all()
            busy = {(t.node, i) for t in uow.tasks.active() for i in t.gpu_indices}
            summary: dict[str, list[int]] = {}
            for node in nodes:
                for gpu in node.gpus:
                    entry = summary.setdefault(gpu.type, [0, 0, 0, 0])
                    entry[0] += 1
                    if (node.name, gpu.index) in busy:
                        entry[1] += 1
                    elif node.state is NodeState.READY and gpu.health is GpuHealth.HEALTHY:
                        entry[2] += 1
                    else:
                        entry[3] += 1
            counts = uow.jobs.count_by_state()
            last = uow.rounds.last()
            out = hadar_pb2.GetClusterStatusResponse(
                gpus=[
                    hadar_pb2.GpuTypeSummary(
                        type=t, total=v[0], busy=v[1], idle=v[2], unavailable=v[3]
                    )
                    for t, v in sorted(summary.items())
                ],
                jobs=[
                    hadar_pb2.JobStateCount(state=JOB_STATE_TO_PB[s], count=c)
                    for s, c in counts.items()
                ],
                policy=self.parts.rounds.policy_name,
                round_seconds=self.parts.settings.round_seconds,
                version=self.parts.version,
                nodes_ready=sum(1 for n in nodes if n.state is NodeState.READY),
                nodes_total=len(nodes),
            )
            if last is not None:
                out.last_round.CopyFrom(
                    hadar_pb2.RoundSummary(
                        number=last.number,
                        started_at=timestamp(last.started_at),
                        duration_s=last.duration_s,
                        policy=last.policy,
                        actions=last.actions,
                        dispatch_failures=last.dispatch_failures,
                    )
                )
            return out

        out = self.parts.tx.read(read)
        next_at = self.parts.next_round_at()
        if next_at is not None:
            out.next_round_at.CopyFrom(timestamp(next_at))
        return out

    @unary(_metrics)
    def ListWorkloads(
        self, request: hadar_pb2.ListWorkloadsRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.ListWorkloadsResponse:
        names = self.parts.tx.read(
            lambda uow: sorted(
                {
                    w
                    for n in uow.nodes.all()
                    if n.state is not NodeState.UNREACHABLE
                    for w in n.workloads
                }
            )
        )
        out = []
        for name in names:
            info = workload_info(name)
            out.append(
                hadar_pb2.WorkloadInfo(
                    name=name,
                    description=info.description,
                    default_batch_size=info.default_batch_size,
                    job_type=info.job_type() if info.default_batch_size else "",
                )
            )
        return hadar_pb2.ListWorkloadsResponse(workloads=out)

    # -- identity and tokens ---------------------------------------------------------------

    @unary(_metrics)
    def WhoAmI(
        self, request: hadar_pb2.WhoAmIRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.WhoAmIResponse:
        caller = current_caller()
        return hadar_pb2.WhoAmIResponse(user=caller.user, admin=caller.admin)

    @unary(_metrics)
    def CreateToken(
        self, request: hadar_pb2.CreateTokenRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.CreateTokenResponse:
        caller = current_caller()
        user = request.user.strip() or caller.user
        if (user != caller.user or request.admin) and not caller.admin:
            raise PermissionDeniedError("only admins may create tokens for others or admin tokens")
        user = fields.name(user, "user", USER_MAX)
        fields.label(request.description, "description", DESCRIPTION_MAX)
        issued = self.parts.tx.write(
            lambda uow: uow.tokens.create(
                user, admin=request.admin, description=request.description
            ),
            jobs=False,
        )
        log.info("token created", user=user, admin=request.admin, by=caller.user, id=issued.info.id)
        return hadar_pb2.CreateTokenResponse(token=issued.plaintext, info=token_to_pb(issued.info))

    @unary(_metrics)
    def ListTokens(
        self, request: hadar_pb2.ListTokensRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.ListTokensResponse:
        caller = current_caller()
        user = fields.text(request.user, "user", USER_MAX).strip()
        if not caller.admin:
            if user and user != caller.user:
                raise PermissionDeniedError("only admins may list other users' tokens")
            user = caller.user
        tokens = self.parts.tx.read(lambda uow: uow.tokens.all(user=user))
        return hadar_pb2.ListTokensResponse(tokens=[token_to_pb(t) for t in tokens])

    @unary(_metrics)
    def RevokeToken(
        self, request: hadar_pb2.RevokeTokenRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.RevokeTokenResponse:
        caller = current_caller()
        if not request.id.strip():
            raise InvalidArgumentError("id", "a token id is required")
        fields.text(request.id, "id", TOKEN_ID_MAX)

        def change(uow: UnitOfWork) -> hadar_pb2.TokenInfo:
            token = uow.tokens.get(request.id.strip())
            if token.user != caller.user and not caller.admin:
                raise PermissionDeniedError("only admins may revoke other users' tokens")
            return token_to_pb(uow.tokens.revoke(token.id))

        info = self.parts.tx.write(change, jobs=False)
        self.parts.auth.forget()
        log.info("token revoked", id=request.id, by=caller.user)
        return hadar_pb2.RevokeTokenResponse(info=info)

    # -- accounting ----------------------------------------------------------------------

    @unary(_metrics)
    def GetFairShare(
        self, request: hadar_pb2.GetFairShareRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.GetFairShareResponse:
        config = self.parts.settings.fair_share_settings()
        rows = self.parts.tx.read(lambda uow: fair_share_report(uow, config, datetime.now(UTC)))
        return hadar_pb2.GetFairShareResponse(
            enabled=config.enabled,
            half_life_s=config.half_life_s,
            rows=[
                hadar_pb2.FairShareRow(
                    user=r.user,
                    group=r.group,
                    raw_share=r.raw_share,
                    share=r.share,
                    usage_gpu_seconds=r.usage_s,
                    usage=r.usage,
                    factor=r.factor,
                    gpus=r.gpus,
                    quota=r.quota,
                )
                for r in rows
            ],
        )

    @unary(_metrics)
    def GetUsage(
        self, request: hadar_pb2.GetUsageRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.GetUsageResponse:
        user = fields.text(request.user, "user", USER_MAX).strip()
        if request.by not in USAGE_GROUPING_FROM_PB:
            raise InvalidArgumentError("by", f"unknown grouping {request.by}")
        grouping = USAGE_GROUPING_FROM_PB[request.by]
        now = datetime.now(UTC)
        until = _when(request.until, "until") if request.HasField("until") else now
        since = _when(request.since, "since") if request.HasField("since") else None
        if since is not None and since >= until:
            raise InvalidArgumentError("since", "must be before until")

        def read(uow: UnitOfWork) -> list[UsageRecord]:
            ended = uow.usage.ended(user=user, since=since, until=until)
            return ended + uow.usage.running(user=user)

        records = self.parts.tx.read(read)
        # The running attempts' part after `until` is clipped away, like any other.
        start = since or min((r.started_at for r in records), default=until)
        groups = summarize(records, since=start, until=min(until, now), grouping=grouping)
        return hadar_pb2.GetUsageResponse(
            rows=[
                hadar_pb2.UsageRow(
                    key=g.key, gpu_seconds=g.gpu_seconds, jobs=g.jobs, attempts=g.attempts
                )
                for g in groups
            ],
            total_gpu_seconds=sum(g.gpu_seconds for g in groups),
            since=timestamp(start),
            until=timestamp(until),
        )

    @unary(_metrics)
    def ListJobHistory(
        self, request: hadar_pb2.ListJobHistoryRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.ListJobHistoryResponse:
        size, before = page(request.page_size, request.page_token)
        user = fields.text(request.user, "user", USER_MAX).strip()
        since = _when(request.since, "since") if request.HasField("since") else None
        states = []
        for i, state in enumerate(request.states):
            decoded = JOB_STATE_FROM_PB.get(state)
            if decoded is None or not is_terminal(decoded):
                raise InvalidArgumentError(
                    f"states[{i}]",
                    f"{common_pb2.JobState.Name(state) if decoded else state} is not a state "
                    "a job ends in (COMPLETED, FAILED, CANCELLED, TIMEOUT)",
                )
            states.append(decoded)

        def read(uow: UnitOfWork) -> tuple[list[Job], list[UsageRecord]]:
            jobs = uow.jobs.history(
                user=user, since=since, states=states, before_id=before, limit=size + 1
            )
            return jobs, uow.usage.for_jobs([j.id for j in jobs[:size]])

        jobs, records = self.parts.tx.read(read)
        more = len(jobs) > size
        jobs = jobs[:size]
        by_job: dict[int, list[UsageRecord]] = {}
        for record in records:
            by_job.setdefault(record.job_id, []).append(record)
        now = datetime.now(UTC)
        caller = current_caller()
        entries = []
        for job in jobs:
            used = by_job.get(job.id, [])
            entries.append(
                hadar_pb2.JobHistoryEntry(
                    job=self._shown(job_to_pb(job), job, caller),
                    run_seconds=run_seconds(used, now),
                    gpu_seconds=gpu_seconds(used, now),
                    attempts=len({r.lease for r in used}),
                    gpu_types=sorted({r.gpu_type for r in used}),
                )
            )
        return hadar_pb2.ListJobHistoryResponse(
            entries=entries, next_page_token=str(jobs[-1].id) if more and jobs else ""
        )

    # -- notifications ---------------------------------------------------------------------

    def _notify_user(self, requested: str, what: str) -> str:
        """Whose default webhook a request is about: the caller's own unless an admin names
        someone else."""
        caller = current_caller()
        user = fields.text(requested, "user", USER_MAX).strip() or caller.user
        if user != caller.user and not caller.admin:
            raise PermissionDeniedError(f"only admins may {what} another user's default webhook")
        return user

    @unary(_metrics)
    def SetNotifyDefault(
        self, request: hadar_pb2.SetNotifyDefaultRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.NotifyDefaultResponse:
        user = self._notify_user(request.user, "set")
        if not request.url.strip():
            raise InvalidArgumentError(
                "url", "a webhook URL is required (ClearNotifyDefault removes one)"
            )
        url = check_url(request.url, "url", self.parts.settings)
        on = notify_states(request.on, "on")
        default = self.parts.tx.write(
            lambda uow: uow.notifications.set_default(user, url, on), jobs=False
        )
        log.info("default webhook set", user=user, by=current_caller().user)
        return notify_default_to_pb(user, default)

    @unary(_metrics)
    def GetNotifyDefault(
        self, request: hadar_pb2.GetNotifyDefaultRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.NotifyDefaultResponse:
        user = self._notify_user(request.user, "read")
        default = self.parts.tx.read(lambda uow: uow.notifications.default_for(user))
        return notify_default_to_pb(user, default)

    @unary(_metrics)
    def ClearNotifyDefault(
        self, request: hadar_pb2.ClearNotifyDefaultRequest, context: grpc.ServicerContext
    ) -> hadar_pb2.NotifyDefaultResponse:
        user = self._notify_user(request.user, "clear")
        self.parts.tx.write(lambda uow: uow.notifications.clear_default(user), jobs=False)
        return notify_default_to_pb(user, None)


USAGE_GROUPING_FROM_PB = {
    hadar_pb2.USAGE_GROUPING_UNSPECIFIED: Grouping.USER,
    hadar_pb2.USAGE_GROUPING_USER: Grouping.USER,
    hadar_pb2.USAGE_GROUPING_GPU_TYPE: Grouping.GPU_TYPE,
    hadar_pb2.USAGE_GROUPING_DAY: Grouping.DAY,
}


def _when(value: Timestamp, field: str) -> datetime:
    try:
        return value.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise InvalidArgumentError(field, "not a valid time") from None


def _watch_messages(
    updates: Sequence[tuple[common_pb2.Job, common_pb2.JobEvent | None]], batch: bool
) -> Iterator[hadar_pb2.WatchJobsResponse]:
    """WatchJobs' messages for ``updates`` (each job with its change, or None in the initial
    snapshot): one each, or with ``batch`` up to WATCH_BATCH_MAX in each."""
    if not batch:
        for job, event in updates:
            message = hadar_pb2.WatchJobsResponse(job=job)
            if event is not None:
                message.event.CopyFrom(event)
            yield message
        return
    for start in range(0, len(updates), WATCH_BATCH_MAX):
        message = hadar_pb2.WatchJobsResponse()
        for job, event in updates[start : start + WATCH_BATCH_MAX]:
            update = message.updates.add()
            update.job.CopyFrom(job)
            if event is not None:
                update.event.CopyFrom(event)
        yield message
