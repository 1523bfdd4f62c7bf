"""Job control as Slurm's scontrol offers it: hold, release, requeue and update.

Only a job's owner or an admin may act on a job. Each change is committed before any
worker hears of it (a requeue's stop orders go out after the commit), and each is safe to
repeat: holding a held job, releasing a job nobody holds, or requeueing a job that already
waits changes nothing.

- hold: a waiting job (PENDING or PREEMPTED) is kept out of every round until released.
  A running job cannot be held; `requeue --hold` stops it with a checkpoint first. A hold
  an admin put on someone else's job only an admin may release (Slurm's admin hold).
- requeue: a running job is stopped (a managed job saves a checkpoint) and waits again;
  a job that ended FAILED, CANCELLED or TIMEOUT waits again. A managed job resumes from
  its last checkpoint; a program that cannot resume (an opaque command, a script without
  the runtime helper) runs again from the start, as Slurm reruns a batch script. Either way
  the new run starts only once the previous one has exited (master/jobs/holds.py), and its
  time limit counts anew. A COMPLETED job is never requeued.
- update: a waiting job's name, time limit, priority, GPU count, GPU types, dependencies,
  preemptibility, warning signal and notifications; a running job's name, time limit,
  priority and notifications (the rest is what its workers started it with). Owners and
  admins alike stay within the cluster's limits (a time limit up to `max_time_limit`, a
  priority in protos/bounds.py's range, the GPUs the cluster has and the owner's quota,
  webhooks the cluster allows), and a job depends only on jobs submitted before it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from master import fields
from master.errors import FailedPreconditionError, InvalidArgumentError, PermissionDeniedError
from master.jobs.holds import WAITING_STATES
from master.jobs.lifecycle import StopOrder, release_tasks
from master.jobs.manager import Caller
from master.jobs.notifications import check_url, endpoint
from master.jobs.usage import run_seconds
from master.jobs.validation import DEPENDENCIES_MAX, NAME_MAX, ClusterFacts, validate_spec
from master.nodes.dispatch import Dispatcher
from master.process.transactions import Transactor
from master.service.codec import spec_to_pb
from master.settings import Settings
from protos import bounds
from protos.arrays import dependency_text
from protos.durations import format_duration
from protos.numbers import TIME_LIMIT_MAX_S
from protos.warnsignal import format_signal
from store import UnitOfWork
from store.domain import Job, JobSpec
from store.states import JobState, is_terminal

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SpecChanges:
    """The fields an update sets; None leaves a field as it is. An empty
    `allowed_gpu_types` means any type."""

    name: str | None = None
    time_limit_s: int | None = None
    priority: float | None = None
    num_gpus: int | None = None
    allowed_gpu_types: tuple[str, ...] | None = None
    # (kind, job id) pairs replacing the job's dependencies; empty: none.
    dependencies: tuple[tuple[str, int], ...] | None = None
    preemptible: bool | None = None
    # (signal, seconds before the stop); signal 0: no warning.
    warning: tuple[int, int] | None = None
    # Empty: the owner's default webhook.
    notify_url: str | None = None
    # The end states that notify (empty: the default), or None for no notification at all
    # (`no_notify`).
    notify_on: tuple[JobState, ...] | None = None
    no_notify: bool | None = None

    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in dataclasses.fields(self))


# Fields that only a waiting job may change: its placement depends on them.
_PLACEMENT_FIELDS = ("num_gpus", "allowed_gpu_types")
# Fields that only a waiting job may change, and why: the round or the worker already acted
# on them when it started.
_WAITING_FIELDS = {
    "num_gpus": "GPUs",
    "allowed_gpu_types": "GPUs",
    "dependencies": "dependencies",
    "preemptible": "preemptibility",
    "warning": "warning signal",
}
# Fields judged against the rest of the spec as a submission is (validate_spec).
_SPEC_CHECKED = (*_PLACEMENT_FIELDS, "preemptible", "warning", "notify_on", "no_notify")
# What validate_spec calls each field an update sets, by the update's name for it.
_SPEC_FIELD_NAMES = {
    "num_gpus": "num_gpus",
    "allowed_gpu_types": "allowed_gpu_types",
    "preemptible": "preemptible",
    "forkable": "preemptible",
    "interactive": "preemptible",
    "warn_signal": "warning",
    "warn_before_s": "warning",
    "notify_on": "notify_on",
    "no_notify": "notify_on",
}


def _job_ref(job: Job) -> str:
    spec = job.spec
    if spec.array_job_id and spec.array_index is not None:
        return f"{spec.array_job_id}_{spec.array_index}"
    return str(job.id)


class JobControl:
    def __init__(
        self,
        tx: Transactor,
        dispatcher: Dispatcher,
        settings: Settings,
        facts: Callable[[], ClusterFacts],
        on_change: Callable[[], None],
        on_capacity: Callable[[bool], None],
    ) -> None:
        self._tx = tx
        self._dispatcher = dispatcher
        self._settings = settings
        self._facts = facts
        self._on_change = on_change
        self._on_capacity = on_capacity

    # -- shared ------------------------------------------------------------------------

    @staticmethod
    def _targets(
        uow: UnitOfWork, caller: Caller, job_id: int, action: str, whole_array: bool
    ) -> tuple[Job, list[Job]]:
        """The job named and what the action applies to: the job, or with `whole_array`
        and an array's id, every element. PERMISSION_DENIED unless the caller owns it or
        is an admin."""
        job = uow.jobs.get(job_id)
        if job.user != caller.user and not caller.admin:
            raise PermissionDeniedError(
                f"job {job_id} belongs to {job.user}; only its owner or an admin may {action} it"
            )
        if whole_array and job.spec.array_job_id == job.id:
            return job, uow.jobs.array_elements([job.id]).get(job.id, [job])
        return job, [job]

    def _done(self, orders: list[StopOrder]) -> None:
        self._dispatcher.send_stops(orders)
        self._on_change()
        self._on_capacity(bool(orders))

    # -- hold and release --------------------------------------------------------------

    def hold(
        self, caller: Caller, job_id: int, reason: str = "", *, whole_array: bool = False
    ) -> Job:
        """Hold a waiting job (or every waiting element of an array) back from scheduling."""

        def change(uow: UnitOfWork) -> Job:
            job, targets = self._targets(uow, caller, job_id, "hold", whole_array)
            text = f"held by {caller.user}" + (f": {reason}" if reason else "")
            result = job
            waiting = [t for t in targets if t.state in WAITING_STATES]
            if not waiting:
                raise FailedPreconditionError(_cannot_hold(job, len(targets) > 1))
            for target in waiting:
                if target.held_by:
                    continue
                done = uow.jobs.set_hold(target.id, caller.user, reason=text)
                if target.id == job_id:
                    result = done
            return result

        job = self._tx.write(change)
        log.info("job held", job_id=job_id, by=caller.user, whole_array=whole_array)
        self._on_change()
        return job

    def release(self, caller: Caller, job_id: int, *, whole_array: bool = False) -> Job:
        """Let a held job (or every held element of an array) be scheduled again."""

        def change(uow: UnitOfWork) -> Job:
            job, targets = self._targets(uow, caller, job_id, "release", whole_array)
            result = job
            for target in targets:
                if not target.held_by:
                    continue
                if target.held_by != target.user and not caller.admin:
                    raise PermissionDeniedError(
                        f"job {_job_ref(target)} was held by the admin {target.held_by}; "
                        "only an admin may release it"
                    )
                done = uow.jobs.set_hold(target.id, "", reason=f"released by {caller.user}")
                if target.id == job_id:
                    result = done
            return result

        job = self._tx.write(change)
        log.info("job released", job_id=job_id, by=caller.user, whole_array=whole_array)
        self._on_change()
        self._on_capacity(False)
        return job

    # -- requeue -----------------------------------------------------------------------

    def requeue(
        self,
        caller: Caller,
        job_id: int,
        reason: str = "",
        *,
        hold: bool = False,
        whole_array: bool = False,
    ) -> Job:
        """Put a running or ended job back in the queue to run again (see the module's
        docstring); with `hold`, held there until released."""
        now = datetime.now(UTC)

        def change(uow: UnitOfWork) -> tuple[Job, list[StopOrder]]:
            job, targets = self._targets(uow, caller, job_id, "requeue", whole_array)
            if job.state is JobState.COMPLETED and len(targets) == 1:
                raise FailedPreconditionError(
                    f"job {_job_ref(job)} COMPLETED; a completed job cannot be requeued "
                    "(submit it again to run it once more)"
                )
            if all(t.state is JobState.COMPLETED for t in targets):
                raise FailedPreconditionError(
                    f"every element of array {job.id} COMPLETED; completed jobs cannot be "
                    "requeued (submit the array again to run it once more)"
                )
            held_by = caller.user if hold else ""
            orders: list[StopOrder] = []
            result = job
            for target in targets:
                if target.state is JobState.COMPLETED:
                    continue
                if target.state in WAITING_STATES:
                    # Already waiting (a retried requeue lands here): only the hold applies.
                    done = (
                        uow.jobs.set_hold(target.id, held_by, reason=f"held by {caller.user}")
                        if hold and not target.held_by
                        else target
                    )
                else:
                    text = _requeue_text(caller, target, reason, hold)
                    orders.extend(self._stop(uow, target, text, now))
                    ran = run_seconds(uow.usage.for_jobs([target.id]), now)
                    done = uow.jobs.requeue(
                        target.id,
                        reason=text,
                        ran_s=ran,
                        keep_progress=target.reports_progress,
                        held_by=held_by,
                        at=now,
                    )
                if target.id == job_id:
                    result = done
            return result, orders

        job, orders = self._tx.write(change)
        log.info("job requeued", job_id=job_id, by=caller.user, tasks_stopped=len(orders))
        self._done(orders)
        return job

    @staticmethod
    def _stop(uow: UnitOfWork, job: Job, reason: str, now: datetime) -> list[StopOrder]:
        # As a time limit stops a job: SIGTERM, then SIGKILL after the grace. A managed job
        # saves a checkpoint meanwhile; a command gets the time to end cleanly, as Slurm's
        # requeue gives a batch script. It runs again: its line says from where.
        return release_tasks(
            uow, uow.tasks.active_for_job(job.id), reason, checkpoint=True, resumes=True, now=now
        )

    # -- update ------------------------------------------------------------------------

    def update(
        self, caller: Caller, job_id: int, changes: SpecChanges, *, whole_array: bool = False
    ) -> Job:
        """Change a job's spec (or every unfinished element's, for a whole array)."""
        if changes.empty():
            raise InvalidArgumentError(
                "update",
                "nothing to change: give a name, time limit, priority, GPUs, GPU types, "
                "dependencies, preemptibility, a warning signal or notifications",
            )
        checked = self._check_values(changes)
        judged = any(getattr(changes, f) is not None for f in _SPEC_CHECKED)
        facts = self._facts() if judged else ClusterFacts()

        def change(uow: UnitOfWork) -> Job:
            job, targets = self._targets(uow, caller, job_id, "update", whole_array)
            live = [t for t in targets if not is_terminal(t.state)]
            if not live:
                raise FailedPreconditionError(
                    f"job {_job_ref(job)} ended {job.state.value}; only waiting or running "
                    "jobs can be updated"
                )
            result = job
            if checked.dependencies:
                _check_dependencies(uow, live, checked.dependencies)
            for target in live:
                spec = self._new_spec(caller, target, checked, facts)
                what = _describe(target.spec, spec)
                if not what:
                    continue
                done = uow.jobs.update_spec(
                    target.id, spec, reason=f"updated by {caller.user}: {what}"
                )
                if target.id == job_id:
                    result = done
            return result

        job = self._tx.write(change)
        log.info("job updated", job_id=job_id, by=caller.user, whole_array=whole_array)
        self._on_change()
        self._on_capacity(False)
        return job

    def _check_values(self, changes: SpecChanges) -> SpecChanges:
        """Each value given, checked on its own (the same ranges as a submission)."""
        name = changes.name
        if name is not None:
            name = name.strip()
            if not 1 <= len(name) <= NAME_MAX:
                raise InvalidArgumentError("name", f"must be 1 to {NAME_MAX} characters")
            fields.printable(name, "name")
        limit = changes.time_limit_s
        if limit is not None:
            if not 1 <= limit <= TIME_LIMIT_MAX_S:
                raise InvalidArgumentError(
                    "time_limit_s", f"must be 1 to {TIME_LIMIT_MAX_S} seconds"
                )
            most = self._settings.max_time_limit_s
            if most and limit > most:
                raise InvalidArgumentError(
                    "time_limit_s",
                    f"time limit {format_duration(limit)} is above the cluster's maximum "
                    f"max_time_limit = {format_duration(most)}",
                )
        if changes.priority is not None and not bounds.valid_priority(changes.priority):
            raise InvalidArgumentError(
                "priority", f"must be from {bounds.PRIORITY_RANGE}, got {changes.priority!r}"
            )
        if changes.num_gpus is not None and not 1 <= changes.num_gpus <= bounds.NUM_GPUS_MAX:
            raise InvalidArgumentError("num_gpus", f"must be 1 to {bounds.NUM_GPUS_MAX}")
        dependencies = changes.dependencies
        if dependencies is not None:
            dependencies = tuple(dict.fromkeys(dependencies))
            for _, job_id in dependencies:
                if job_id < 1:
                    raise InvalidArgumentError("dependencies", "job ids are >= 1")
                fields.int64(job_id, "dependencies")
            if len(dependencies) > DEPENDENCIES_MAX:
                raise InvalidArgumentError(
                    "dependencies",
                    f"{len(dependencies)} dependencies; at most {DEPENDENCIES_MAX} allowed",
                )
        url = changes.notify_url
        if url is not None:
            url = url.strip()
            if url:
                check_url(url, "notify_url", self._settings)
        if changes.no_notify and (url or changes.notify_on):
            raise InvalidArgumentError(
                "notify_on", "none asks for no notification, but a webhook or states ask for one"
            )
        return dataclasses.replace(changes, name=name, dependencies=dependencies, notify_url=url)

    def _new_spec(
        self, caller: Caller, job: Job, changes: SpecChanges, facts: ClusterFacts
    ) -> JobSpec:
        spec = job.spec
        if job.state not in WAITING_STATES:
            for field, what in _WAITING_FIELDS.items():
                if getattr(changes, field) is not None:
                    raise FailedPreconditionError(
                        f"{field}: job {_job_ref(job)} is {job.state.value}; only a waiting "
                        f"job's {what} can change (`hctl requeue --hold {job.id}`, update "
                        f"it, then `hctl release {job.id}`)"
                    )
        warning = (spec.warn_signal, spec.warn_before_s)
        if changes.warning is not None:
            warning = changes.warning
        notify_on, no_notify = spec.notify_on, spec.no_notify
        if changes.notify_on is not None or changes.no_notify is not None:
            notify_on, no_notify = changes.notify_on or (), bool(changes.no_notify)
        notify_url = spec.notify_url if changes.notify_url is None else changes.notify_url
        if changes.notify_url and changes.notify_on is None and changes.no_notify is None:
            # A webhook named now is one to tell: it lifts an earlier "none".
            no_notify = False
        if no_notify:
            # "None" now: not even the job's own webhook is told.
            notify_url = ""
        updated = dataclasses.replace(
            spec,
            name=spec.name if changes.name is None else changes.name,
            time_limit_s=spec.time_limit_s
            if changes.time_limit_s is None
            else changes.time_limit_s,
            priority=spec.priority if changes.priority is None else changes.priority,
            num_gpus=spec.num_gpus if changes.num_gpus is None else changes.num_gpus,
            allowed_gpu_types=(
                spec.allowed_gpu_types
                if changes.allowed_gpu_types is None
                else changes.allowed_gpu_types
            ),
            dependencies=(
                spec.dependencies if changes.dependencies is None else changes.dependencies
            ),
            preemptible=spec.preemptible if changes.preemptible is None else changes.preemptible,
            warn_signal=warning[0],
            warn_before_s=warning[1] if warning[0] else 0,
            notify_url=notify_url,
            notify_on=notify_on,
            no_notify=no_notify,
        )
        if all(getattr(changes, f) is None for f in _SPEC_CHECKED):
            return updated
        # Judged against the rest of the spec and the cluster as a submission is. The
        # webhook goes through masked (spec_to_pb): it was checked on its own.
        with _renamed(_SPEC_FIELD_NAMES):
            checked = validate_spec(spec_to_pb(updated), facts)
        updated = dataclasses.replace(
            updated,
            preemptible=checked.preemptible,
            warn_signal=checked.warn_signal,
            warn_before_s=checked.warn_before_s,
            notify_on=checked.notify_on,
            no_notify=checked.no_notify,
        )
        if changes.num_gpus is None and changes.allowed_gpu_types is None:
            return updated
        fair = self._settings.fair_share_config()
        quota = fair.quota(job.user) if fair is not None else 0
        if quota and checked.num_gpus > quota:
            raise InvalidArgumentError(
                "num_gpus",
                f"{checked.num_gpus} GPUs is more than user {job.user}'s quota of {quota} "
                "GPUs at once (max_gpus_per_user)",
            )
        return dataclasses.replace(
            updated, num_gpus=checked.num_gpus, allowed_gpu_types=checked.allowed_gpu_types
        )


@contextmanager
def _renamed(names: Mapping[str, str]) -> Iterator[None]:
    """Re-raises a spec validation error on one of `names`' keys under the update's own
    field name for it (`spec.num_gpus` -> `num_gpus`, `spec.warn_signal[0]` ->
    `warning`; an index kept where the names agree)."""
    try:
        yield
    except InvalidArgumentError as exc:
        field = exc.field.removeprefix("spec.")
        root = field.split("[", 1)[0].split(".", 1)[0]
        if not exc.field.startswith("spec.") or root not in names:
            raise
        message = str(exc).split(": ", 1)[1]
        renamed = names[root] + field[len(root) :] if names[root] == root else names[root]
        raise InvalidArgumentError(renamed, message) from None


def _check_dependencies(
    uow: UnitOfWork, targets: Sequence[Job], dependencies: tuple[tuple[str, int], ...]
) -> None:
    """Dependencies an update gives `targets`: jobs that exist and were submitted before
    each of them (so that dependencies never form a cycle), and not their own array (an
    element would wait for itself)."""
    known = uow.jobs.get_many({job_id for _, job_id in dependencies})
    for kind, job_id in dependencies:
        if job_id not in known:
            raise InvalidArgumentError(
                "dependencies", f"{kind}:{job_id}: job {job_id} does not exist"
            )
        for target in targets:
            if job_id == target.spec.array_job_id:
                raise InvalidArgumentError(
                    "dependencies",
                    f"{kind}:{job_id}: job {_job_ref(target)} is an element of array "
                    f"{job_id}; it cannot wait for its own array",
                )
            if job_id >= target.id:
                raise InvalidArgumentError(
                    "dependencies",
                    f"{kind}:{job_id}: job {_job_ref(target)} can only depend on jobs "
                    "submitted before it",
                )


def _requeue_text(caller: Caller, job: Job, reason: str, hold: bool) -> str:
    """The requeue as the job's history and its output's `hadar:` line tell it: who (an
    admin acting on another's job is named as one), whether it waits held, what it ended
    as, and the caller's reason: "requeued by root (admin) after it ended TIMEOUT: more
    time"."""
    who = caller.user + (" (admin)" if caller.admin and caller.user != job.user else "")
    text = f"requeued by {who}"
    if hold:
        text = f"requeued and held by {who}"
    if is_terminal(job.state):
        text += f" after it ended {job.state.value}"
    return text + (f": {reason}" if reason else "")


def _cannot_hold(job: Job, array: bool) -> str:
    if array:
        return f"no element of array {job.id} is waiting; only waiting jobs can be held"
    if job.state is JobState.RUNNING:
        return (
            f"job {_job_ref(job)} is running; only waiting jobs can be held: "
            f"`hctl requeue --hold {job.id}` stops it with a checkpoint and holds it"
        )
    return f"job {_job_ref(job)} ended {job.state.value}; only waiting jobs can be held"


def _describe(before: JobSpec, after: JobSpec) -> str:
    """What changed, for the job's history: "time limit 1h -> 30m, priority 1 -> 0.5"."""
    parts: list[str] = []
    for label, old, new in _changes(before, after):
        parts.append(f"{label} {old} -> {new}")
    return ", ".join(parts)


def _changes(before: JobSpec, after: JobSpec) -> Iterator[tuple[str, str, str]]:
    if before.name != after.name:
        yield "name", repr(before.name), repr(after.name)
    if before.time_limit_s != after.time_limit_s:
        yield (
            "time limit",
            format_duration(before.time_limit_s) if before.time_limit_s else "none",
            format_duration(after.time_limit_s),
        )
    if before.priority != after.priority:
        yield "priority", f"{before.priority:g}", f"{after.priority:g}"
    if before.num_gpus != after.num_gpus:
        yield "GPUs", str(before.num_gpus), str(after.num_gpus)
    if before.allowed_gpu_types != after.allowed_gpu_types:
        yield (
            "GPU types",
            ",".join(before.allowed_gpu_types) or "any",
            ",".join(after.allowed_gpu_types) or "any",
        )
    if before.dependencies != after.dependencies:
        yield (
            "dependencies",
            dependency_text(before.dependencies) or "none",
            dependency_text(after.dependencies) or "none",
        )
    if before.preemptible != after.preemptible:
        yield "preemptible", _yes_no(before.preemptible), _yes_no(after.preemptible)
    if (before.warn_signal, before.warn_before_s) != (after.warn_signal, after.warn_before_s):
        yield "signal", _warning_text(before), _warning_text(after)
    if before.notify_url != after.notify_url:
        yield (
            "webhook",
            endpoint(before.notify_url) if before.notify_url else "default",
            endpoint(after.notify_url) if after.notify_url else "default",
        )
    if (before.notify_on, before.no_notify) != (after.notify_on, after.no_notify):
        yield "notify on", _notify_text(before), _notify_text(after)


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def _warning_text(spec: JobSpec) -> str:
    if not spec.warn_signal:
        return "none"
    return format_signal(spec.warn_signal, spec.warn_before_s)


def _notify_text(spec: JobSpec) -> str:
    if spec.no_notify:
        return "none"
    return ",".join(s.value.lower() for s in spec.notify_on) or "default"
