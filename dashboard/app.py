"""The dashboard's web application: login, the pages, and what a page shows when something
goes wrong (an unknown job, a token that no longer works, the master down).

Every page is rendered on the server from the master's answers to the logged-in user's own
calls. A page polls its own URL (htmx, with the ``HX-Request`` header) and gets back only its
live part, so it updates in place without a reload and without any inline script.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from clients.client import HadarClient
from clients.config import ENV_CONFIG, resolve
from clients.errors import HadarError, NotFound, PermissionDenied, Unauthenticated, Unavailable
from clients.retry import RetryPolicy
from dashboard import pages
from dashboard.headers import SecurityHeaders
from dashboard.sessions import COOKIE_NAME, LoginThrottle, SessionStore
from dashboard.settings import DashboardSettings
from dashboard.views import ProgressLog, poll_interval

STATIC_DIR = Path(__file__).parent / "static"
# Longest token the login form takes: a real one is far shorter.
TOKEN_MAX = 512

Connect = Callable[[str], HadarClient]


def connector(settings: DashboardSettings) -> Connect:
    """A client of the master for one user's token, reached as settings say. No hctl config
    file plays a part: the dashboard's settings are the whole of it."""
    base = resolve(settings.master, "-", settings.call_timeout_s, env={ENV_CONFIG: "/dev/null"})

    def connect(token: str) -> HadarClient:
        config = type(base)(
            address=base.address,
            token=token,
            timeout_s=settings.call_timeout_s,
            ca_file=Path(settings.master_ca_file) if settings.master_ca_file else None,
            address_source="dashboard settings",
            token_source="login",
            cert_file=Path(settings.master_cert_file) if settings.master_cert_file else None,
            key_file=Path(settings.master_key_file) if settings.master_key_file else None,
        )
        # One quick retry at most: a page shows the outage banner rather than wait.
        return HadarClient(config=config, retry=RetryPolicy(attempts=2, max_backoff_s=0.3))

    return connect


@dataclass(slots=True)
class Dashboard:
    settings: DashboardSettings
    connect: Connect
    sessions: SessionStore
    templates: Environment
    progress: ProgressLog = field(default_factory=ProgressLog)
    throttle: LoginThrottle = field(default_factory=LoginThrottle)

    def render(
        self,
        name: str,
        context: Mapping[str, Any],
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> HTMLResponse:
        body = self.templates.get_template(name).render(
            {"settings": self.settings, "refresh": self.settings.refresh_s, **context}
        )
        return HTMLResponse(body, status_code=status, headers=dict(headers or {}))


def create_app(settings: DashboardSettings, connect: Connect | None = None) -> Starlette:
    templates = Environment(
        loader=PackageLoader("dashboard", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    templates.filters["when"] = pages.when
    templates.filters["ago"] = pages.ago
    templates.filters["duration"] = pages.duration
    board = Dashboard(
        settings,
        connect or connector(settings),
        SessionStore(settings.session_ttl_s, settings.session_idle_s),
        templates,
    )

    def page(view: pages.View) -> Callable[[Request], Response]:
        """A logged-in page: its view's template, whole or (for htmx's polls) its live part."""

        def endpoint(request: Request) -> Response:
            session = board.sessions.get(request.cookies.get(COOKIE_NAME))
            if session is None:
                return _to_login(request)
            partial = request.headers.get("HX-Request") == "true"
            base = {"session": session, "request": request, "partial": partial}
            started = time.monotonic()
            try:
                template, context = view(board, session, request)
            except Unauthenticated:
                board.sessions.close(session.id)
                return _to_login(request, "your token is no longer accepted: log in again")
            except NotFound as exc:
                return board.render("error.html", {**base, "message": str(exc)}, 404)
            except ValueError as exc:  # a FilterError, or a job id that is no id
                return board.render("error.html", {**base, "message": str(exc)}, 400)
            except PermissionDenied as exc:
                return board.render("error.html", {**base, "message": str(exc)}, 403)
            except Unavailable as exc:
                # A poll keeps its place (and keeps polling) with the banner in it.
                context = {**base, "outage": str(exc), "live_url": _live_url(request)}
                return board.render("outage.html", context, 200 if partial else 503)
            except HadarError as exc:
                return board.render("error.html", {**base, "message": str(exc)}, 502)
            asked = float(context.pop("refresh", settings.refresh_s))
            refresh = poll_interval(settings.refresh_s, asked, time.monotonic() - started)
            context = {**base, **context, "live_url": _live_url(request), "refresh": refresh}
            return board.render(template, context)

        return endpoint

    async def login_form(request: Request) -> Response:
        if board.sessions.get(request.cookies.get(COOKIE_NAME)) is not None:
            return RedirectResponse("/cluster", 303)
        note = request.query_params.get("expired")
        return board.render("login.html", {"error": note and pages.EXPIRED_NOTE})

    async def login(request: Request) -> Response:
        form = await request.form()
        token = str(form.get("token") or "").strip()
        if not token or len(token) > TOKEN_MAX or not token.isprintable():
            return board.render("login.html", {"error": "enter your API token"}, 400)
        address = request.client.host if request.client else ""
        wait = board.throttle.wait_s(address)
        if wait > 0:
            note = f"too many failed logins from here: try again in {wait:.0f} s"
            return board.render("login.html", {"error": note}, 429)
        return await run_in_threadpool(_login, token, address)

    def _login(token: str, address: str) -> Response:
        client = board.connect(token)
        try:
            identity = client.whoami()
        except PermissionDenied:
            client.close()
            board.throttle.failed(address)
            return board.render("login.html", {"error": "that token is not accepted"}, 401)
        except HadarError as exc:
            client.close()
            return board.render("login.html", {"outage": str(exc)}, 503)
        session = board.sessions.open(identity.user, identity.admin, client)
        response = RedirectResponse("/cluster", 303)
        response.set_cookie(
            COOKIE_NAME,
            session.id,
            max_age=int(settings.session_ttl_s),
            httponly=True,
            samesite="strict",
            secure=settings.tls,
            path="/",
        )
        return response

    async def logout(request: Request) -> Response:
        form = await request.form()
        session = board.sessions.get(request.cookies.get(COOKIE_NAME))
        if session is not None and form.get("form_key") == session.form_key:
            board.sessions.close(session.id)
        response = RedirectResponse("/login", 303)
        response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")
        return response

    async def home(request: Request) -> Response:
        return RedirectResponse("/cluster", 303)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def not_found(request: Request, exc: Exception) -> Response:
        return board.render("error.html", {"message": "no such page", "session": None}, 404)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        board.sessions.close_all()

    app = Starlette(
        routes=[
            Route("/", home),
            Route("/healthz", healthz),
            Route("/login", login_form, methods=["GET"]),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/cluster", page(pages.cluster)),
            Route("/queue", page(pages.queue)),
            Route("/jobs/{ref}", page(pages.job)),
            Route("/users", page(pages.users)),
            Route("/history", page(pages.history)),
            Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
        ],
        exception_handlers={404: not_found},
        middleware=[Middleware(SecurityHeaders, tls=settings.tls)],
        lifespan=lifespan,
    )
    app.state.board = board
    return app


def _to_login(request: Request, why: str = "") -> Response:
    target = "/login?expired=1" if why else "/login"
    if request.headers.get("HX-Request") == "true":
        # htmx follows this with a whole-page load, not a swap into the polled part.
        return Response(status_code=200, headers={"HX-Redirect": target})
    return RedirectResponse(target, 303)


def _live_url(request: Request) -> str:
    query = urlencode(list(request.query_params.multi_items()))
    return request.url.path + (f"?{query}" if query else "")


__all__ = ["create_app"]
