"""The scheduling views as they cross to the master's child processes (the planning and the
forecasting process) and back.

Importing this module registers, with the pickler multiprocessing uses, in the master and
(importing it too) in the child:

- the views' read-only mappings, which pickle cannot copy by itself: each crosses as a
  read-only view of a copy of its items;
- the slotted dataclasses that a round's answer is made of (jobs, specs, tasks, nodes,
  actions, allocations), each as its class and a tuple of its fields' values. Pickle's own
  way for a slotted dataclass asks `dataclasses.fields()` again for every object on both
  sides: that was half of the planning process's time to send an answer, and the master
  unpickles the answer on the interpreter that every call waits for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from types import MappingProxyType, ModuleType

import master.scheduling.diff
import master.scheduling.plan
import master.scheduling.round
import master.scheduling.throughput
import master.scheduling.views
import store.domain

# The field names of each class registered below, in the order their values cross.
_FIELDS: dict[type, tuple[str, ...]] = {}


def _mapping_proxy(items: dict[object, object]) -> MappingProxyType[object, object]:
    return MappingProxyType(items)


def _reduce_mapping_proxy(
    proxy: MappingProxyType[object, object],
) -> tuple[Callable[[dict[object, object]], MappingProxyType[object, object]], tuple[object]]:
    return _mapping_proxy, (dict(proxy),)


def _rebuild(cls: type, values: tuple[object, ...]) -> object:
    """An object of the slotted dataclass `cls` with its fields set to `values`, as pickle
    would restore it: without calling `__init__` (nor its checks) again."""
    obj: object = object.__new__(cls)
    for name, value in zip(_FIELDS[cls], values, strict=True):
        object.__setattr__(obj, name, value)
    return obj


_Reduced = tuple[Callable[[type, tuple[object, ...]], object], tuple[type, tuple[object, ...]]]


def _reducer(cls: type) -> Callable[[object], _Reduced]:
    names = _FIELDS[cls]

    def reduce(obj: object) -> _Reduced:
        return _rebuild, (cls, tuple([getattr(obj, name) for name in names]))

    return reduce


def _slotted_dataclasses(module: ModuleType) -> dict[type, tuple[str, ...]]:
    """The dataclasses `module` defines whose slots are exactly their fields, with the
    fields' names."""
    found: dict[type, tuple[str, ...]] = {}
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and value.__module__ == module.__name__
            and dataclasses.is_dataclass(value)
            and "__slots__" in value.__dict__
        ):
            names = tuple(f.name for f in dataclasses.fields(value))
            if set(value.__dict__["__slots__"]) == set(names):
                found[value] = names
    return found


ForkingPickler.register(MappingProxyType, _reduce_mapping_proxy)
for _module in (
    store.domain,
    master.scheduling.diff,
    master.scheduling.plan,
    master.scheduling.round,
    master.scheduling.throughput,
    master.scheduling.views,
):
    for _cls, _names in _slotted_dataclasses(_module).items():
        _FIELDS[_cls] = _names
        ForkingPickler.register(_cls, _reducer(_cls))
