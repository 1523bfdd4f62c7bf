"""The parts of a running master, as the gRPC servicers see them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from master.jobs.control import JobControl
from master.jobs.manager import JobManager
from master.nodes.dispatch import Dispatcher
from master.nodes.registry import Registry
from master.nodes.workers import WorkerClients
from master.process.events import ChangeSignal
from master.process.metrics import MasterMetrics
from master.process.transactions import Transactor
from master.rounds.runner import RoundRunner
from master.scheduling.throughput import ThroughputModel
from master.service.auth import Authenticator
from master.settings import Settings


@dataclass(frozen=True)
class Components:
    settings: Settings
    tx: Transactor
    auth: Authenticator
    jobs: JobManager
    control: JobControl
    registry: Registry
    rounds: RoundRunner
    dispatcher: Dispatcher
    workers: WorkerClients
    metrics: MasterMetrics
    changes: ChangeSignal
    base_model: ThroughputModel
    next_round_at: Callable[[], datetime | None]
    version: str
