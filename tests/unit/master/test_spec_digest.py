"""The digest kept with an idempotency key: what counts as the same request."""

from __future__ import annotations

import dataclasses
from typing import Any

from master.jobs.validation import spec_digest
from store.domain import JobSpec
from store.states import JobState, ProgramKind

SPEC = JobSpec(
    name="sweep",
    num_gpus=2,
    iterations=100,
    program_kind=ProgramKind.COMMAND,
    argv=("bash", "run.sh"),
    env=(("A", "1"),),
    notify_on=(JobState.FAILED,),
)


def test_the_digest_is_stable_across_releases() -> None:
    """Digests are stored: a resend to an upgraded master must compute the same one, so the
    canonical form may not change. A field at its default is left out, so adding a field
    to JobSpec later keeps this value."""
    assert spec_digest(SPEC) == "a230817e8c429eaf7346fa9a91b6c07da8a7ccde624b00460c933a335b71397e"
    assert spec_digest(dataclasses.replace(SPEC, workload="")) == spec_digest(SPEC)


def _another(value: object) -> object:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, ProgramKind):
        return ProgramKind.SCRIPT
    if value is None:
        return 3
    assert isinstance(value, tuple)
    return (*value, value[0]) if value else (("afterok", 1),)


def test_every_field_counts() -> None:
    """Changing any one field of the spec changes the digest."""
    for spec_field in dataclasses.fields(JobSpec):
        value = getattr(SPEC, spec_field.name)
        changes: dict[str, Any] = {spec_field.name: _another(value)}
        changed = dataclasses.replace(SPEC, **changes)
        assert spec_digest(changed) != spec_digest(SPEC), spec_field.name
