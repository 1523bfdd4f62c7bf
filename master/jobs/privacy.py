"""Who may read a job's private parts, and what everyone else sees of it.

As on a Slurm cluster, everyone may see the queue: a job's id, user, name, state, GPUs,
times, placement and reason. Its output, command line, environment values, paths,
checkpoints, webhook and the output of its failures belong to its owner and the admins; a
lab may open them to the members of the owner's group (``job_data_readers = "group"``,
with groups as ``fair_share_groups`` names them). The rule lives here alone, so that every
RPC that returns a job, and the log relay, ask the same question.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from master.jobs.manager import Caller
from master.settings import JobDataReaders, Settings


@dataclass(frozen=True, slots=True)
class JobPrivacy:
    readers: JobDataReaders = "owner"
    # user -> the users of their group (themselves included); used with readers="group".
    groups: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings) -> JobPrivacy:
        members: dict[str, frozenset[str]] = {}
        for group in settings.fair_share_settings().groups.values():
            for user in group:
                members[user] = members.get(user, frozenset()) | frozenset(group)
        return cls(readers=settings.job_data_readers, groups=members)

    def may_read(self, caller: Caller, owner: str) -> bool:
        """Whether `caller` may read the private parts of a job `owner` submitted."""
        if caller.admin or caller.user == owner:
            return True
        return self.readers == "group" and owner in self.groups.get(caller.user, frozenset())
