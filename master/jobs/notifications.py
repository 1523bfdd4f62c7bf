"""Webhook notifications when jobs end: which URLs are accepted, what is sent, and when a
failed call is tried again. Pure rules; master/jobs/webhooks.py sends.

A job's end and the call owed for it are stored together (store/repositories/
notifications.py); the sender POSTs the payload built here, at least once: a receiver that
must not act twice keys on `delivery_id` (also the X-Hadar-Delivery header).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from master.errors import InvalidArgumentError
from master.settings import Settings
from protos.durations import format_duration
from store.domain import Job, Notification
from store.states import DEFAULT_NOTIFY_ON, TERMINAL_JOB_STATES, JobState

# Long enough for any chat service's webhook (Slack's are about 80 bytes, with a token).
URL_MAX_BYTES = 2048
SIGNATURE_HEADER = "X-Hadar-Signature"
DELIVERY_HEADER = "X-Hadar-Delivery"
USER_AGENT = "hadar-webhook/1"


def check_url(url: str, field: str, settings: Settings) -> str:
    """The URL, stripped, when the cluster accepts it as a webhook; InvalidArgumentError
    naming `field` otherwise."""
    url = url.strip()
    if not settings.webhooks_enabled:
        raise InvalidArgumentError(field, "webhooks are turned off on this cluster")
    if len(url.encode()) > URL_MAX_BYTES:
        raise InvalidArgumentError(field, f"must be at most {URL_MAX_BYTES} bytes")
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise InvalidArgumentError(field, "must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        _ = parts.port  # a bad port raises here
    except ValueError as exc:
        raise InvalidArgumentError(field, f"not a valid URL: {exc}") from None
    schemes = settings.webhook_scheme_set
    if parts.scheme.lower() not in schemes:
        allowed = " or ".join(sorted(schemes))
        raise InvalidArgumentError(field, f"must be an {allowed} URL, not {url!r}")
    if not host:
        raise InvalidArgumentError(field, f"has no host: {url!r}")
    if parts.username or parts.password:
        raise InvalidArgumentError(
            field, "must not carry a user name or password (put a token in the path or query)"
        )
    if not host_allowed(host, settings.webhook_hosts):
        raise InvalidArgumentError(
            field,
            f"host {host!r} is not one the cluster allows for webhooks "
            f"(webhook_allow_hosts: {', '.join(settings.webhook_hosts)})",
        )
    return url


def refusal(url: str, settings: Settings) -> str:
    """Why the cluster's settings now refuse a stored URL (they may have changed since it
    was accepted); empty when they accept it."""
    try:
        check_url(url, "url", settings)
    except InvalidArgumentError as exc:
        return str(exc).removeprefix("url: ")
    return ""


def host_allowed(host: str, patterns: Sequence[str]) -> bool:
    """`patterns` empty allows any host; `*.example.org` matches its subdomains."""
    if not patterns:
        return True
    host = host.lower().rstrip(".")
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False


def check_states(states: Iterable[JobState], field: str) -> tuple[JobState, ...]:
    """End states a webhook is told of, in the order of JobState, without repeats."""
    wanted = set()
    for i, state in enumerate(states):
        if state not in TERMINAL_JOB_STATES:
            raise InvalidArgumentError(
                f"{field}[{i}]",
                f"{state.value} is not an end state (COMPLETED, FAILED, TIMEOUT, CANCELLED)",
            )
        wanted.add(state)
    return tuple(s for s in JobState if s in wanted)


def effective_states(states: Sequence[JobState]) -> tuple[JobState, ...]:
    return tuple(states) or DEFAULT_NOTIFY_ON


def endpoint(url: str) -> str:
    """scheme://host[:port]: what may be shown of a webhook whose path holds a secret."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"


def backoff_s(failures: int, *, base_s: float, max_s: float) -> float:
    """Wait before the next attempt after `failures` failed ones (1, 2, ...): base, then
    twice as long each time, capped."""
    if failures < 1:
        return 0.0
    return min(max_s, base_s * 2.0 ** min(failures - 1, 62))


def schedule(max_attempts: int, *, base_s: float, max_s: float) -> list[float]:
    """Waits between attempts of a call that keeps failing (one fewer than the attempts)."""
    return [backoff_s(n, base_s=base_s, max_s=max_s) for n in range(1, max_attempts)]


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def summary(job: Job, state: JobState, run_s: float, gpu_s: float) -> str:
    """One plain line, usable as a chat message's text (no links, no markup)."""
    text = f"Hadar job {job.id} ({job.spec.name}) of {job.user} ended {state.value}"
    if run_s > 0:
        text += f" after {format_duration(run_s)} of run time, {gpu_s / 3600:.2f} GPU-hours"
    if job.exit_code is not None:
        text += f"; exit code {job.exit_code}"
    if job.reason:
        text += f": {job.reason}"
    return text


def payload(notification: Notification, job: Job, *, run_s: float, gpu_s: float) -> dict[str, Any]:
    """The JSON body POSTed for a job's end."""
    state = notification.job_state
    return {
        "event": "job.ended",
        "delivery_id": notification.id,
        "job_id": job.id,
        "name": job.spec.name,
        "user": job.user,
        "state": state.value,
        "reason": job.reason,
        "exit_code": job.exit_code,
        "submitted_at": _iso(job.submitted_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "run_seconds": round(run_s, 3),
        "gpu_hours": round(gpu_s / 3600, 6),
        "num_gpus": job.spec.num_gpus,
        "text": summary(job, state, run_s, gpu_s),
    }


def signature(body: bytes, secret: str) -> str:
    """X-Hadar-Signature: `sha256=` and the hex HMAC-SHA256 of the body under the secret."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"
