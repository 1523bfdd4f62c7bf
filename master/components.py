"""The parts of a running master, as the gRPC servicers see them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from master.auth import Authenticator
from master.dispatch import Dispatcher
from master.events import ChangeSignal
from master.jobs import JobManager
from master.metrics import MasterMetrics
from master.registry import Registry
from master.rounds import RoundRunner
from master.scheduling.throughput import ThroughputModel
from master.settings import Settings
from master.transactions import Transactor
from master.workers import WorkerClients


@dataclass(frozen=True)
class Components:
    settings: Settings
    tx: Transactor
    auth: Authenticator
    jobs: JobManager
    registry: Registry
    rounds: RoundRunner
    dispatcher: Dispatcher
    workers: WorkerClients
    metrics: MasterMetrics
    changes: ChangeSignal
    base_model: ThroughputModel
    next_round_at: Callable[[], datetime | None]
    version: str
