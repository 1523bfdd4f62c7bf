"""The scheduling views as they cross to the master's child processes (the planning and the
forecasting process) and back.

The views keep read-only mappings, which pickle cannot copy by itself: each crosses as a
read-only view of a copy of its items. Importing this module registers that with the
pickler multiprocessing uses, in the master and (importing it too) in the child.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from types import MappingProxyType


def _mapping_proxy(items: dict[object, object]) -> MappingProxyType[object, object]:
    return MappingProxyType(items)


def _reduce_mapping_proxy(
    proxy: MappingProxyType[object, object],
) -> tuple[Callable[[dict[object, object]], MappingProxyType[object, object]], tuple[object]]:
    return _mapping_proxy, (dict(proxy),)


ForkingPickler.register(MappingProxyType, _reduce_mapping_proxy)
