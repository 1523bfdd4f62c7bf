"""The Policy protocol and the registry of policies by name.

Every module in :mod:`master.scheduling.policies` that defines ``NAME`` (the policy's
public name, e.g. ``"sjf-bsbf"``) and ``make(**params) -> Policy`` is registered
automatically; adding a policy is adding one module.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any, Protocol, runtime_checkable

from master.scheduling.plan import Plan
from master.scheduling.views import JobView, Snapshot

PolicyFactory = Callable[..., "Policy"]


@runtime_checkable
class Policy(Protocol):
    """Decides, once per round, which GPUs each active job gets for the next lease.

    ``plan`` must be a pure function of its inputs and the policy's own state (a policy
    may remember what it decided in earlier rounds, e.g. time each job has received);
    it must not read clocks, files or the network. ``now`` is the round's start time in
    seconds on the caller's clock (simulated or wall).
    """

    name: str

    def plan(self, snapshot: Snapshot, now: float) -> Plan: ...


@runtime_checkable
class CompletionObserver(Protocol):
    """Optional: a policy that learns from finished jobs (e.g. ``a-srpt``'s predictor).

    The caller (the simulator, the daemon's round) passes each job that completed, as last
    seen, with ``iterations`` the iterations it actually ran, once, before the next
    ``plan``. A policy must not depend on being told: a job that left the snapshot is all
    it is guaranteed to see.
    """

    def observe_completion(self, job: JobView, iterations: float, now: float) -> None: ...


@runtime_checkable
class StartsNone(Protocol):
    """Optional: a policy that can tell from the waiting jobs and the free GPUs alone that
    its plan would change nothing (e.g. strict FIFO, whose head of the queue does not fit).

    ``starts_none`` returns True only when, every running job left where it runs and
    ``free_by_type`` GPUs of each type free (every usable type named), its plan would keep
    every running job where it is, start none of ``waiting`` (as its latest views show
    them), and change nothing of its state that a later plan reads. A simulator may then
    carry the round over without asking for the plan.
    """

    def starts_none(self, waiting: Sequence[JobView], free_by_type: Mapping[str, int]) -> bool: ...


def notify_completion(policy: Policy, job: JobView, iterations: float, now: float) -> None:
    """Tell ``policy`` that ``job`` completed after ``iterations``, if it wants to know."""
    if isinstance(policy, CompletionObserver):
        policy.observe_completion(job, iterations, now)


def stable_when_settled(policy: Policy) -> bool:
    """Whether ``policy`` declares (attribute ``stable_when_settled``) that a settled round
    needs no plan: when every job it is shown runs where it ran, and no job arrived or
    left since its last plan, that plan would keep every job where it is and change none of
    its state (no random draw, no bookkeeping by time). A simulator may then carry the
    round over without calling it; the policy's plans stay exactly the same."""
    return bool(getattr(policy, "stable_when_settled", False))


def stable_after_departures(policy: Policy) -> bool:
    """Whether ``policy`` declares (attribute ``stable_after_departures``) that a settled
    round stays one when jobs left: when every job it is shown runs where it ran and no job
    arrived since its last plan, though some may have completed, that plan would keep every
    job where it is and change nothing of its state that a later plan reads. Only a policy
    that declares :func:`stable_when_settled` is asked. A simulator may then carry such a
    round over too."""
    return stable_when_settled(policy) and bool(getattr(policy, "stable_after_departures", False))


def forks_every_job(policy: Policy) -> bool:
    """Whether ``policy`` declares (attribute ``forks_every_job``) that it runs every job as
    forked copies whatever the job allows, as a paper's setting does (``hadare``'s paper
    variant). Only the simulator runs such a policy, treating every job as forkable; the
    daemon refuses it, since averaging copies changes how a job trains and only its owner
    may ask for that."""
    return bool(getattr(policy, "forks_every_job", False))


def learns(policy: Policy) -> bool:
    """Whether ``policy`` learns from completed jobs (see :class:`CompletionObserver`)."""
    return isinstance(policy, CompletionObserver)


@runtime_checkable
class RemembersAcrossRestarts(Protocol):
    """Optional: a policy whose memory must survive a restart of the master (what it
    learned, e.g. ``a-srpt``'s completed-job history), as plain JSON.

    ``export_memory`` returns a JSON-serialisable dict (str keys; lists, numbers, strings);
    ``import_memory`` restores it into a new instance and raises ``ValueError`` for a
    memory it cannot read. Round-to-round bookkeeping that the next rounds rebuild (time
    received so far, the last plan) is not memory in this sense.
    """

    def export_memory(self) -> dict[str, Any]: ...

    def import_memory(self, memory: Mapping[str, Any]) -> None: ...


def export_memory(policy: Policy) -> dict[str, Any] | None:
    """The policy's memory to keep, or None for a policy that keeps none."""
    if isinstance(policy, RemembersAcrossRestarts):
        return policy.export_memory()
    return None


def import_memory(policy: Policy, memory: Mapping[str, Any]) -> bool:
    """Restore ``memory`` into ``policy``; False (nothing done) for a policy that keeps none.
    Raises ``ValueError`` for a memory the policy cannot read."""
    if not isinstance(policy, RemembersAcrossRestarts):
        return False
    policy.import_memory(memory)
    return True


class UnknownPolicyError(ValueError):
    """A policy name that no module registers."""


@cache
def _registry() -> dict[str, PolicyFactory]:
    from master.scheduling import policies as package

    found: dict[str, PolicyFactory] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        name = getattr(module, "NAME", None)
        factory = getattr(module, "make", None)
        if not isinstance(name, str) or not callable(factory):
            continue
        if name in found:
            raise RuntimeError(f"two policy modules register the name {name!r}")
        found[name] = factory
    return found


def available_policies() -> list[str]:
    """Names of all registered policies, sorted."""
    return sorted(_registry())


def make_policy(name: str, **params: Any) -> Policy:
    """A new instance of the policy called ``name`` with ``params``.

    Raises :class:`UnknownPolicyError` (a ``ValueError``) listing the known names, and
    ``ValueError`` for parameters the policy does not accept.
    """
    factory = _registry().get(name)
    if factory is None:
        known = ", ".join(available_policies()) or "(none)"
        raise UnknownPolicyError(f"unknown policy {name!r}; known policies: {known}")
    try:
        policy = factory(**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for policy {name!r}: {exc}") from None
    return policy


def policy_parameters(name: str) -> tuple[str, ...]:
    """Keyword parameters the policy called ``name`` accepts (e.g. ``("seed",)``)."""
    factory = _registry().get(name)
    if factory is None:
        known = ", ".join(available_policies()) or "(none)"
        raise UnknownPolicyError(f"unknown policy {name!r}; known policies: {known}")
    return tuple(
        p.name
        for p in inspect.signature(factory).parameters.values()
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    )
