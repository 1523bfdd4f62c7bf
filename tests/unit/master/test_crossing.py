"""What a round's answer is made of crosses between the master and its child processes
unchanged: slotted dataclasses as their fields' values (derived fields included, no
`__init__` run again), read-only mappings as read-only copies."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler
from types import MappingProxyType

from master.rounds import crossing
from master.scheduling.diff import Action, ActionKind
from master.scheduling.plan import Allocation, GpuSlot
from store.domain import Job, JobSpec
from tests.unit.master.test_listed_jobs import job


def crossed(obj: object) -> object:
    return pickle.loads(ForkingPickler.dumps(obj))


def test_slotted_dataclasses_cross_as_their_fields_with_derived_fields_kept() -> None:
    allocation = Allocation(copies=((GpuSlot("n1", 0), GpuSlot("n2", 1)),), batch_shares=(8, 8))
    action = Action(ActionKind.START, 7, allocation, None, reason="fits")
    answer = ({7: job(7)}, [action])

    back = crossed(answer)

    assert back == answer
    assert isinstance(back, tuple)
    (moved,) = back[1]
    assert moved.allocation is not None
    assert moved.allocation.slots == (GpuSlot("n1", 0), GpuSlot("n2", 1))
    assert moved.allocation.nodes == ("n1", "n2") and moved.allocation.num_gpus == 2
    assert type(back[0][7].spec) is JobSpec


def test_the_answer_classes_have_their_own_reducer_and_others_keep_pickles() -> None:
    """Registered: the slotted dataclasses of the answer; a class whose slots are not its
    fields alone is left to pickle's own way."""
    for cls in (Job, JobSpec, Action, Allocation):
        assert cls in crossing._FIELDS
    assert all(
        set(cls.__dict__["__slots__"]) == set(names) for cls, names in crossing._FIELDS.items()
    )


def test_a_read_only_mapping_crosses_as_a_read_only_copy() -> None:
    source = {"v100": 4}
    back = crossed(MappingProxyType(source))
    assert isinstance(back, MappingProxyType) and dict(back) == source
