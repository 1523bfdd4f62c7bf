"""The security headers every response carries: no script but the dashboard's own files
(no inline script, no eval), no framing, no content sniffing, no referrer leaving the site,
and no caching of pages that show one user's view."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)

HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-opener-policy", "same-origin"),
    ("permissions-policy", "camera=(), microphone=(), geolocation=()"),
)


class SecurityHeaders:
    """ASGI middleware adding HEADERS (and HSTS over TLS) to every HTTP response; pages
    (not the static files) are marked uncacheable."""

    def __init__(self, app: ASGIApp, tls: bool = False) -> None:
        self.app = app
        extra = [("strict-transport-security", "max-age=31536000")] if tls else []
        self._headers = [(k.encode(), v.encode()) for k, v in (*HEADERS, *extra)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(self._headers)
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
