"""Cluster specs for the simulator: ``"v100:36,p100:36,k80:36"``."""

from __future__ import annotations

import re

from master.scheduling.views import ClusterView

_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def parse_cluster_spec(text: str) -> dict[str, int]:
    """``"v100:8,p100:0,k80:4"`` -> ``{"v100": 8, "p100": 0, "k80": 4}`` (order kept).

    A count of 0 is allowed (the type simply has no GPUs). Raises ``ValueError`` naming
    the bad part.
    """
    counts: dict[str, int] = {}
    if not text.strip():
        raise ValueError("empty cluster spec; expected e.g. 'v100:8,k80:4'")
    for raw in text.split(","):
        part = raw.strip()
        name, sep, count = part.partition(":")
        name = name.strip()
        if not sep or not _TYPE.match(name):
            raise ValueError(f"bad cluster spec entry {part!r}; expected TYPE:COUNT")
        try:
            value = int(count)
        except ValueError:
            raise ValueError(f"bad GPU count in {part!r}: {count.strip()!r}") from None
        if value < 0:
            raise ValueError(f"negative GPU count in {part!r}")
        if name in counts:
            raise ValueError(f"GPU type {name!r} listed twice in cluster spec")
        counts[name] = value
    if sum(counts.values()) == 0:
        raise ValueError(f"cluster spec {text!r} has no GPUs")
    return counts


def build_cluster(text_or_counts: str | dict[str, int], gpus_per_server: int = 4) -> ClusterView:
    counts = (
        parse_cluster_spec(text_or_counts) if isinstance(text_or_counts, str) else text_or_counts
    )
    return ClusterView.from_counts(counts, gpus_per_server=gpus_per_server)
