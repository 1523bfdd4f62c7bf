"""The training-loop helper a managed script uses.

::

    run = TrainingRun.from_env(model, optimizer, default_batch_size=64)
    for step in run.steps():
        for micro in step.micro_batches():
            inputs, targets = my_data(step.iteration, micro.start, micro.stop)
            loss = criterion(run.model(inputs.to(run.device)), targets.to(run.device))
            micro.backward(loss)

The helper owns the update: it scales each micro-batch's (mean) loss so the accumulated
gradient is the mean over the job's global batch, all-reduces it over the ranks of the job
(or its copy), steps the optimizer, and between iterations handles stop requests, the lease's
iteration budget, fake-GPU pacing, checkpoints and progress records. When ``steps()`` ends,
the final checkpoint and the ``exit`` record are written; the script then returns normally
(exit code 0).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from worker.runtime import rng
from worker.runtime.batching import Span, even_split, micro_spans, rank_spans
from worker.runtime.checkpoint import CheckpointError, CheckpointStore, job_directory
from worker.runtime.contract import ExitReason
from worker.runtime.copies import average_copies
from worker.runtime.distributed import DistContext, init_distributed
from worker.runtime.lease import LeaseWatch
from worker.runtime.pacing import Pacer
from worker.runtime.progress import ProgressWriter
from worker.runtime.settings import ContractError, RuntimeSettings

log = logging.getLogger("hadar.runtime")

CHECKPOINT_FORMAT = 1


@dataclass(frozen=True, slots=True)
class MicroBatch:
    """Samples [start, stop) of iteration ``iteration``'s global batch, computed here."""

    index: int
    start: int
    stop: int
    iteration: int
    stream: int
    _step: Step

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def sample_indices(self) -> range:
        """Positions in the job's sample stream (iteration * global batch + offset)."""
        base = self.iteration * self._step.run.global_batch_size
        return range(base + self.start, base + self.stop)

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagates ``loss``, the mean loss over this micro-batch's samples."""
        self._step._backward(self, loss)


class Step:
    """One iteration (one optimizer update over the global batch)."""

    def __init__(self, run: TrainingRun, iteration: int) -> None:
        self.run = run
        self.iteration = iteration
        self.stream = run.copy_index
        self._started = False
        self.finished = False
        self.began = run._clock()
        self._backward_calls = 0
        self._last_yield_at = self.began
        self._last_backward_at = self.began
        self._loss_sum: torch.Tensor | None = None
        self.stop_agreed = False
        self.checkpoint_agreed = False

    @property
    def loss(self) -> torch.Tensor | None:
        """This rank's mean loss over its share (a detached tensor), once backpropagated."""
        return self._loss_sum

    def micro_batches(self) -> Iterator[MicroBatch]:
        if self._started:
            raise RuntimeError("micro_batches() may be iterated once per step")
        self._started = True
        run = self.run
        spans = run.micro_spans
        ddp = run.ddp
        for index, span in enumerate(spans):
            if ddp is not None:
                # DDP decides in forward whether the backward all-reduces: only the last does.
                ddp.require_backward_grad_sync = index == len(spans) - 1
            self._last_yield_at = run._clock()
            yield MicroBatch(index, span.start, span.stop, self.iteration, self.stream, self)
            if self._backward_calls != index + 1:
                raise RuntimeError("call micro.backward(loss) exactly once per micro-batch")
        if ddp is not None:
            ddp.require_backward_grad_sync = True
        run._finish_step(self)
        self.finished = True

    def _backward(self, micro: MicroBatch, loss: torch.Tensor) -> None:
        run = self.run
        self._backward_calls += 1
        self._last_backward_at = run._clock()
        scale = micro.size * run._loss_scale
        # A single process on the whole batch scales by exactly 1: skip the multiply.
        torch.autograd.backward(loss if scale == 1.0 else loss * scale)
        share = micro.size / run.local_batch_size
        weighted = loss.detach() if share == 1.0 else loss.detach() * share
        self._loss_sum = weighted if self._loss_sum is None else self._loss_sum + weighted


class TrainingRun:
    """Resumable, preemptible training of one job's process; see the module docstring."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        settings: RuntimeSettings,
        *,
        lr_scheduler: Any = None,
        max_grad_norm: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        handle_signals: bool = True,
    ) -> None:
        self.settings = settings
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.max_grad_norm = max_grad_norm
        self.user_state: dict[str, Any] = {}
        self._clock = clock
        self._handle_signals = handle_signals
        self._stop_requested = False
        self._lease = LeaseWatch(settings.lease_file)
        self._looped = False
        self.exit_reason: ExitReason | None = None

        # Installed first: a stop that arrives while resuming or meeting peers is honoured
        # after the first iteration instead of killing the process without a checkpoint.
        self._previous_handlers = self._install_signal_handlers()
        try:
            self._setup(model, sleep)
        except BaseException:
            self._restore_signal_handlers(self._previous_handlers)
            if hasattr(self, "context"):
                self.context.shutdown()
            raise

    def _setup(self, model: nn.Module, sleep: Callable[[float], None]) -> None:
        settings = self.settings
        if settings.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        self.context: DistContext = init_distributed(settings)
        self.model = model.to(self.context.device)
        self.ddp = model if isinstance(model, DistributedDataParallel) else None
        self._module: nn.Module = self.ddp.module if self.ddp is not None else model
        self._pacer = Pacer(settings.fake_gpu_speed, sleep)
        self._store = (
            CheckpointStore(job_directory(settings.checkpoint_dir, settings.job_id))
            if settings.checkpoint_dir is not None
            else None
        )
        self.checkpoint_iterations = 0
        self.iterations_done = self._restore()
        self._start_iterations = self.iterations_done
        self._setup_batch()
        self._end = self._last_iteration()
        self._progress = ProgressWriter(settings.progress_file, settings.progress_interval_s)
        self._last_loss: torch.Tensor | None = None
        self._own_reduce = self.ddp is None and self.context.copy_size > 1
        # HadarE: this copy's own iterations in this lease (its budget counts them), and
        # the lease end after which the copies meet to average (None: not known yet).
        self._own_done = 0
        self._average_at: float | None = None

    @classmethod
    def from_env(
        cls,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        lr_scheduler: Any = None,
        default_batch_size: int | None = None,
        default_iterations: int | None = None,
        max_grad_norm: float | None = None,
        env: Mapping[str, str] | None = None,
        handle_signals: bool = True,
    ) -> TrainingRun:
        """A run configured by the contract's variables (``env`` defaults to os.environ).

        ``default_batch_size`` and ``default_iterations`` apply when the environment does not
        set ``HADAR_GLOBAL_BATCH_SIZE`` / ``HADAR_ITERATIONS`` (e.g. a script run by hand).
        """
        settings = RuntimeSettings.from_env(
            os.environ if env is None else env,
            default_batch_size=default_batch_size,
            default_iterations=default_iterations,
        )
        return cls(
            model,
            optimizer,
            settings,
            lr_scheduler=lr_scheduler,
            max_grad_norm=max_grad_norm,
            handle_signals=handle_signals,
        )

    # What a script reads.
    @property
    def device(self) -> torch.device:
        return self.context.device

    @property
    def total_iterations(self) -> int:
        return self.settings.total_iterations

    @property
    def global_batch_size(self) -> int:
        return self.settings.global_batch_size

    @property
    def accumulation_steps(self) -> int:
        return len(self.micro_spans)

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def rank(self) -> int:
        return self.context.rank

    @property
    def world_size(self) -> int:
        return self.context.world_size

    @property
    def copy_index(self) -> int:
        return self.context.copy_index

    @property
    def is_main_process(self) -> bool:
        return self.context.rank == 0

    @property
    def completed(self) -> bool:
        return self.iterations_done >= self.total_iterations

    @property
    def lease_end_iteration(self) -> int:
        """The iteration count at which this lease stops (job total at most)."""
        return self._end

    def request_stop(self) -> None:
        """Checkpoint and end after the iteration in flight (what SIGTERM does)."""
        self._stop_requested = True

    # The loop.
    def steps(self) -> Iterator[Step]:
        if self._looped:
            raise RuntimeError("steps() runs once per TrainingRun (one lease per process)")
        self._looped = True
        try:
            yield from self._loop()
        finally:
            self._restore_signal_handlers(self._previous_handlers)
            self._previous_handlers = {}
            self._progress.close()
            self.context.shutdown()

    def _loop(self) -> Iterator[Step]:
        now = self._clock()
        self._last_checkpoint_at = now
        self._report_from = (now, self.iterations_done)
        self._report("progress", now)
        copies = self.settings.num_copies > 1
        stop = False
        while True:
            meet = False
            while self.iterations_done < self._end and not stop and not meet:
                self.optimizer.zero_grad(set_to_none=True)
                step = Step(self, self.iterations_done)
                yield step
                if not step.finished:
                    raise RuntimeError("every step's micro_batches() must be iterated to the end")
                self.iterations_done += 1
                self._last_loss = step.loss
                # Alone, a stop that arrived after this iteration's update needs no agreement.
                stop = step.stop_agreed or (self.context.copy_size == 1 and self._stop_requested)
                now = self._clock()
                if copies:
                    meet = step.checkpoint_agreed
                    if self._progress.due(now):
                        self._report("progress", now)
                elif step.checkpoint_agreed and self.iterations_done < self._end and not stop:
                    self._checkpoint(now)
                elif self._progress.due(now):
                    self._report("progress", now)
            if not copies:
                break
            ended, stop = self._meet(stopped=stop)
            if ended:
                break
        self._end_lease(stopped=stop)

    def _meet(self, *, stopped: bool) -> tuple[bool, bool]:
        """HadarE: every copy meets here (at the end of its share, on a stop, when the lease
        it started under ends although renewed, or every checkpoint interval); their
        parameters are averaged and the job's count becomes start + the copies'
        iterations. Unless the lease ends here (a copy was stopped, or no copy has work
        left), the average is checkpointed and every copy continues from it with its even
        share of what remains. Returns whether the lease ends, and whether a copy was
        stopped."""
        settings, context = self.settings, self.context
        copies = settings.num_copies
        local = self.iterations_done - self._start_iterations
        self._own_done += local
        # Per copy what is left of its lease budget (-1: no budget; copies may have
        # different budgets), then the copies' iterations since the last meeting and the
        # number of stopped copies; each copy's first process speaks for it.
        counts = torch.zeros(copies + 2, dtype=torch.float64, device=self.device)
        if context.copy_rank == 0:
            budget = settings.iteration_budget
            counts[context.copy_index] = max(0, budget - self._own_done) if budget > 0 else -1
            counts[copies] = local
            counts[copies + 1] = float(stopped)
        context.all_reduce_world(counts)
        values = [int(v) for v in counts.tolist()]
        average_copies(self._module, context)
        self.iterations_done = self._start_iterations + values[copies]
        self._start_iterations = self.iterations_done
        shares = self._shares(values[:copies])
        self._end = self.iterations_done + shares[settings.copy_index]
        any_stopped = values[copies + 1] > 0
        if any_stopped or sum(shares) == 0:
            return True, any_stopped
        now = self._clock()
        if self._store is not None:
            self._checkpoint(now)
        self._last_checkpoint_at = self._clock()
        self._report_from = (now, self.iterations_done)
        self._average_at = None
        log.info("copies averaged at %d iterations", self.iterations_done)
        return False, False

    def _shares(self, budgets_left: list[int]) -> list[int]:
        """Each copy's iterations from here: its even share of what remains, within what
        is left of its lease budget (-1: none)."""
        remaining = max(0, self.total_iterations - self.iterations_done)
        shares = even_split(remaining, self.settings.num_copies)
        return [
            share if left < 0 else min(share, left)
            for share, left in zip(shares, budgets_left, strict=True)
        ]

    def _finish_step(self, step: Step) -> None:
        """After the last micro-batch: pace, all-reduce, agree on stopping, update."""
        context = self.context
        if self._pacer.active:
            self._pace(step)
        wants_checkpoint = (
            self.settings.checkpoint_interval_s > 0
            and context.copy_rank == 0
            and self._clock() - self._last_checkpoint_at >= self.settings.checkpoint_interval_s
        )
        if self.settings.num_copies > 1 and context.copy_rank == 0:
            wants_checkpoint = self._lease_turned() or wants_checkpoint
        if not self._stop_requested and self._lease.over():
            log.warning("lease over without renewal (the agent did not stop this task): stopping")
            self._stop_requested = True
        flags = [float(self._stop_requested), float(wants_checkpoint)]
        if context.copy_size > 1:
            grads = [p.grad for p in self._module.parameters() if p.grad is not None]
            if self._own_reduce and grads and all(g.dtype == grads[0].dtype for g in grads):
                # One collective carries the gradients and the stop/checkpoint flags.
                flat = torch.cat(
                    [g.reshape(-1) for g in grads]
                    + [torch.tensor(flags, dtype=grads[0].dtype, device=self.device)]
                )
                context.all_reduce_copy(flat)
                offset = 0
                for grad in grads:
                    grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
                    offset += grad.numel()
                flags = flat[offset:].tolist()
            else:
                if self._own_reduce:
                    for grad in grads:
                        context.all_reduce_copy(grad)
                agreed = torch.tensor(flags, dtype=torch.float64, device=self.device)
                context.all_reduce_copy(agreed)
                flags = agreed.tolist()
        step.stop_agreed = flags[0] > 0
        step.checkpoint_agreed = flags[1] > 0
        if self.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self._module.parameters(), self.max_grad_norm)
        self.optimizer.step()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()

    def _pace(self, step: Step) -> None:
        """Sleeps as a slower GPU would have computed, *before* any collective: time spent
        waiting for peers is not compute, and pacing it would feed back between ranks."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = self._clock()
        if self.ddp is not None and self.context.copy_size > 1:
            # DDP all-reduces inside the last backward; count that backward as twice its
            # forward (the usual ratio) instead of timing it.
            forward = step._last_backward_at - step._last_yield_at
            compute = step._last_backward_at - step.began + 2 * forward
        else:
            compute = now - step.began
        self._pacer.pace(compute)

    def _lease_turned(self) -> bool:
        """Whether the lease this copy has been running under since the last meeting has
        ended (renewed or not): the round's end, where HadarE averages its copies."""
        ends = self._lease.ends()
        if self._average_at is None:
            if ends is not None and not self._lease.reached(ends):
                self._average_at = ends
            return False
        return self._lease.reached(self._average_at)

    def _end_lease(self, *, stopped: bool) -> None:
        if self.iterations_done >= self.total_iterations:
            reason: ExitReason = "completed"
        elif self.iterations_done >= self._end or (self.settings.num_copies > 1 and not stopped):
            reason = "lease_done"
        else:
            reason = "stopped"
        self.exit_reason = reason
        now = self._clock()
        if self._store is not None and self.iterations_done != self.checkpoint_iterations:
            self._checkpoint(now)
        self._report("exit", now, exit_reason=reason)
        log.info("lease ended (%s) at %d iterations", reason, self.iterations_done)

    # Checkpoints.
    def _checkpoint(self, now: float) -> None:
        if self._store is None:
            return
        states = self.context.all_gather_world(rng.capture_rng())
        if self.context.rank == 0:
            state = {
                "format": CHECKPOINT_FORMAT,
                "job_id": self.settings.job_id,
                "iterations": self.iterations_done,
                "total_iterations": self.total_iterations,
                "global_batch_size": self.global_batch_size,
                "model": self._module.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "lr_scheduler": (
                    self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None
                ),
                "rng": states,
                "user_state": self.user_state,
                "saved_at": time.time(),
            }
            self._store.save(self.iterations_done, state)
        self.context.barrier()
        self.checkpoint_iterations = self.iterations_done
        self._last_checkpoint_at = self._clock()
        self._report("checkpoint", now)

    def _restore(self) -> int:
        settings = self.settings
        checkpoint = None
        if self._store is not None:
            checkpoint = self._store.load_latest(
                on_skip=lambda path, why: log.warning("skipping checkpoint %s: %s", path, why)
            )
        if checkpoint is None:
            if settings.iterations_done_hint > 0:
                where = self._store.directory if self._store is not None else "(no directory)"
                raise CheckpointError(
                    f"the job has {settings.iterations_done_hint} iterations done but no "
                    f"readable checkpoint is in {where}"
                )
            rng.seed_everything(rng.derive_seed(settings.seed, "train", self.context.rank))
            return 0
        state = checkpoint.state
        if state.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{checkpoint.path}: unknown format {state.get('format')!r}")
        self._module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lr_scheduler is not None and state.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        states = state["rng"]
        if len(states) == self.context.world_size:
            rng.restore_rng(states[self.context.rank])
        else:
            # A different layout than when saved: reseed deterministically instead.
            rng.seed_everything(
                rng.derive_seed(settings.seed, "train", checkpoint.iterations, self.context.rank)
            )
        self.user_state = dict(state.get("user_state") or {})
        iterations = int(state["iterations"])
        if settings.iterations_done_hint and iterations != settings.iterations_done_hint:
            log.warning(
                "checkpoint has %d iterations, the master expected %d; resuming from the "
                "checkpoint",
                iterations,
                settings.iterations_done_hint,
            )
        self.checkpoint_iterations = iterations
        log.info("resumed from %s", checkpoint.path)
        return iterations

    # Batch layout.
    def _setup_batch(self) -> None:
        settings = self.settings
        context = self.context
        requested = settings.local_batch_size if settings.local_batch_size is not None else -1
        gathered = context.all_gather_world((requested, self.iterations_done))
        starts = {int(start) for _, start in gathered}
        if len(starts) > 1:
            raise CheckpointError(f"ranks resumed from different checkpoints: {sorted(starts)}")
        members = context.my_copy_ranks
        requested_sizes = [int(gathered[rank][0]) for rank in members]
        if all(size < 0 for size in requested_sizes):
            sizes = even_split(settings.global_batch_size, len(members))
        elif any(size < 0 for size in requested_sizes):
            raise ContractError("HADAR_LOCAL_BATCH_SIZE is set on some ranks and not others")
        else:
            sizes = requested_sizes
        if sum(sizes) != settings.global_batch_size or min(sizes) < 1:
            raise ContractError(
                f"local batch sizes {sizes} do not split the global batch "
                f"{settings.global_batch_size}"
            )
        self.rank_span: Span = rank_spans(sizes)[context.copy_rank]
        self.local_batch_size = self.rank_span.size
        try:
            self.micro_spans = micro_spans(self.rank_span, settings.accumulation_steps)
        except ValueError as error:
            raise ContractError(f"HADAR_ACCUMULATION_STEPS: {error}") from None
        # Sum over ranks of (micro size * scale * mean loss) must be the global-batch mean;
        # DDP divides the summed gradient by its world size, so pre-multiply by it.
        world = context.copy_size if self.ddp is not None else 1
        self._loss_scale = world / settings.global_batch_size

    def _last_iteration(self) -> int:
        settings = self.settings
        remaining = max(0, settings.total_iterations - self.iterations_done)
        if settings.num_copies > 1:
            remaining = even_split(remaining, settings.num_copies)[settings.copy_index]
        if settings.iteration_budget > 0:
            remaining = min(remaining, settings.iteration_budget)
        return self.iterations_done + remaining

    # Progress.
    def _report(self, event: str, now: float, exit_reason: ExitReason | None = None) -> None:
        since, done_then = self._report_from
        elapsed = now - since
        rate = (self.iterations_done - done_then) / elapsed if elapsed > 0 else 0.0
        loss = float(self._last_loss.item()) if self._last_loss is not None else math.nan
        self._progress.write(
            event,
            iterations_done=self.iterations_done,
            iterations_per_s=rate,
            samples_per_s=rate * self.global_batch_size,
            loss=loss,
            checkpoint_iterations=self.checkpoint_iterations,
            exit_reason=exit_reason,
            now=now,
        )
        if event == "progress":
            self._report_from = (now, self.iterations_done)

    # Signals.
    def _install_signal_handlers(self) -> dict[int, Any]:
        if not self._handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for number in (signal.SIGTERM, signal.SIGINT):
            previous[number] = signal.signal(number, self._on_signal)
        return previous

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        self._stop_requested = True

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for number, handler in previous.items():
            signal.signal(number, handler)
