"""The webhook sender: delivers the calls owed for jobs' ends (the notifications outbox).

It runs on its own thread and pool, never in a round: rows are read and outcomes recorded in
short transactions of their own, and the HTTP calls happen outside any transaction, each
bounded by `webhook_timeout_s`, so a dead or slow endpoint delays only its own deliveries.
Sent with the standard library's urllib: one JSON POST needs no more, and the master gains
no dependency. Redirects are not followed (a redirect could lead past the allowed hosts).
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from master.jobs import notifications
from master.jobs.usage import gpu_seconds, run_seconds
from master.process.events import ChangeSignal
from master.process.metrics import MasterMetrics
from master.process.transactions import Transactor
from master.settings import Settings
from store import UnitOfWork
from store.domain import Job, Notification

log = structlog.get_logger(__name__)

# Rows taken per pass; the rest wait for the next one.
BATCH = 100
# Of a response, only this much is read (its body is not used).
RESPONSE_READ_BYTES = 64 * 1024
# After a wake-up by a change, wait this long before looking again, so a burst of progress
# reports does not turn into a burst of queries.
MIN_PASS_INTERVAL_S = 0.2


@dataclass(frozen=True, slots=True)
class Outcome:
    delivered: bool
    # HTTP status of the answer; 0 when none came.
    status_code: int = 0
    error: str = ""
    # Trying again cannot help (the endpoint refused the call itself: 4xx but 408/429).
    permanent: bool = False
    # The endpoint's Retry-After (seconds), honoured up to webhook_backoff_max_s.
    retry_after_s: float | None = None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def post_json(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> Outcome:
    """POST `body` to `url`; a 2xx answer delivers it."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            response.read(RESPONSE_READ_BYTES)
            return Outcome(delivered=True, status_code=int(response.status))
    except urllib.error.HTTPError as exc:
        code = int(exc.code)
        exc.close()
        if 300 <= code < 400:
            return Outcome(False, code, f"HTTP {code}: redirects are not followed", True)
        permanent = 400 <= code < 500 and code not in (408, 425, 429)
        retry_after = _seconds(exc.headers.get("Retry-After") if exc.headers else None)
        return Outcome(False, code, f"HTTP {code} {exc.reason}".strip(), permanent, retry_after)
    except TimeoutError:
        return Outcome(False, 0, f"no answer within {timeout_s:g}s")
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return Outcome(False, 0, f"no answer within {timeout_s:g}s")
        return Outcome(False, 0, f"could not connect: {reason}")
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(False, 0, f"{type(exc).__name__}: {exc}")


def _seconds(value: str | None) -> float | None:
    """Retry-After in its delay-seconds form; None for an HTTP date or nonsense."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())


Poster = Callable[[str, bytes, dict[str, str], float], Outcome]


class WebhookSender:
    def __init__(
        self,
        tx: Transactor,
        settings: Settings,
        metrics: MasterMetrics,
        changes: ChangeSignal,
        *,
        post: Poster = post_json,
    ) -> None:
        self._tx = tx
        self._settings = settings
        self._metrics = metrics
        self._changes = changes
        self._post = post
        self._pool = ThreadPoolExecutor(
            max_workers=settings.webhook_concurrency, thread_name_prefix="hadar-webhook"
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._in_flight: set[int] = set()

    # -- life --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="hadar-webhooks", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop looking for calls; a call in flight ends within its timeout. What is not
        delivered stays in the outbox for the next start."""
        self._stop.set()
        self._changes.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            seen = self._changes.generation
            try:
                self.deliver_due()
                wait_s = self._until_next()
            except Exception:
                log.exception("webhook delivery pass failed")
                wait_s = self._settings.webhook_poll_s
            self._changes.wait(seen, wait_s)
            if self._changes.closed:
                # Nothing will signal changes any more: poll until stopped.
                self._stop.wait(wait_s)
            else:
                self._stop.wait(MIN_PASS_INTERVAL_S)

    def _until_next(self) -> float:
        poll = self._settings.webhook_poll_s
        with self._lock:
            busy = set(self._in_flight)
        # Calls in flight are left out: they end by themselves within their timeout.
        due = self._tx.read(lambda uow: uow.notifications.next_due_at(excluding=busy))
        if due is None:
            return poll
        return max(0.0, min(poll, (due - datetime.now(UTC)).total_seconds()))

    # -- delivering --------------------------------------------------------------------

    def deliver_due(self, *, wait: bool = False) -> int:
        """Start every call that is due and not already in flight; returns how many. With
        `wait`, return only once they have been tried (tests, tools)."""
        now = datetime.now(UTC)
        due = self._tx.read(lambda uow: uow.notifications.due(now, limit=BATCH))
        futures: list[Future[None]] = []
        for item in due:
            with self._lock:
                if item.id in self._in_flight:
                    continue
                self._in_flight.add(item.id)
            try:
                futures.append(self._pool.submit(self._attempt, item))
            except RuntimeError:  # the pool is shut down: the master is stopping
                with self._lock:
                    self._in_flight.discard(item.id)
                break
        if wait and futures:
            wait_all(futures)
        return len(futures)

    def _attempt(self, item: Notification) -> None:
        try:
            self._deliver(item)
        except Exception as exc:
            if self._stop.is_set():
                # A call that outlived the master's stop: its outcome could not be stored,
                # so the next master makes it again (at least once).
                log.warning(
                    "webhook attempt not recorded: the master stopped",
                    notification_id=item.id,
                    error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )
            else:
                log.exception("webhook delivery failed", notification_id=item.id)
        finally:
            with self._lock:
                self._in_flight.discard(item.id)

    def _deliver(self, item: Notification) -> None:
        settings = self._settings
        refused = notifications.refusal(item.url, settings)
        if refused:
            # The cluster's settings changed since the URL was accepted: it is not called.
            self._record(item, Outcome(False, 0, f"not sent: {refused}", permanent=True))
            return
        job, run_s, gpu_s = self._tx.read(lambda uow: _job_and_usage(uow, item.job_id))
        body = json.dumps(
            notifications.payload(item, job, run_s=run_s, gpu_s=gpu_s), sort_keys=True
        ).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": notifications.USER_AGENT,
            notifications.DELIVERY_HEADER: str(item.id),
        }
        if settings.webhook_secret:
            headers[notifications.SIGNATURE_HEADER] = notifications.signature(
                body, settings.webhook_secret
            )
        outcome = self._post(item.url, body, headers, settings.webhook_timeout_s)
        self._record(item, outcome)

    def _record(self, item: Notification, outcome: Outcome) -> None:
        settings = self._settings
        at = datetime.now(UTC)
        failures = item.attempts + 1
        retry_at: datetime | None = None
        retry = not outcome.delivered and not outcome.permanent
        if retry and failures < settings.webhook_max_attempts:
            wait_s = notifications.backoff_s(
                failures,
                base_s=settings.webhook_backoff_s,
                max_s=settings.webhook_backoff_max_s,
            )
            if outcome.retry_after_s is not None:
                wait_s = max(wait_s, min(outcome.retry_after_s, settings.webhook_backoff_max_s))
            retry_at = at + timedelta(seconds=wait_s)
        self._tx.write(
            lambda uow: uow.notifications.record_attempt(
                item.id,
                at=at,
                status_code=outcome.status_code,
                error=outcome.error,
                delivered=outcome.delivered,
                retry_at=retry_at,
            ),
            jobs=False,
        )
        if outcome.delivered:
            result = "delivered"
        elif retry_at is not None:
            result = "retrying"
        else:
            result = "gave_up"
        self._metrics.webhook_deliveries.labels(outcome=result).inc()
        log.info(
            "webhook attempt",
            notification_id=item.id,
            job_id=item.job_id,
            endpoint=notifications.endpoint(item.url),
            attempt=failures,
            outcome=result,
            error=outcome.error,
        )


def _job_and_usage(uow: UnitOfWork, job_id: int) -> tuple[Job, float, float]:
    job = uow.jobs.get(job_id)
    records = uow.usage.for_jobs([job_id])
    at = job.finished_at or datetime.now(UTC)
    return job, run_seconds(records, at), gpu_seconds(records, at)
