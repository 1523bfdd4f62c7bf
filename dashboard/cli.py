"""``hadar-dashboard``: serve the web dashboard of one master.

Every setting is a flag or a ``HADAR_DASHBOARD_*`` variable (see dashboard.settings)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from dashboard.settings import DEFAULT_LISTEN, DEFAULT_MASTER, SettingsError, build


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hadar-dashboard",
        description="Serve the lab's web dashboard: users log in with their Hadar API token "
        "and see the cluster, the queue, their jobs and the accounting as hctl shows them.",
    )
    p.add_argument("--listen", help=f"HOST:PORT to serve on (default {DEFAULT_LISTEN})")
    p.add_argument("--master", help=f"the master's gRPC address (default {DEFAULT_MASTER})")
    p.add_argument("--master-ca-file", help="CA bundle of the master's TLS certificate")
    p.add_argument("--master-cert-file", help="client certificate for the master (PEM)")
    p.add_argument("--master-key-file", help="its key (PEM)")
    p.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", help="and this key (PEM)")
    p.add_argument("--refresh-s", help="seconds between a page's refreshes (default 1)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = build(vars(args), os.environ)
    except SettingsError as exc:
        print(f"hadar-dashboard: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    from clients.config import ConfigError
    from dashboard.app import create_app

    try:
        app = create_app(settings)
    except ConfigError as exc:
        print(f"hadar-dashboard: master: {exc}", file=sys.stderr)
        return 2
    scheme = "https" if settings.tls else "http"
    print(
        f"hadar-dashboard: serving {scheme}://{settings.listen} for the master at "
        f"{settings.master}",
        flush=True,
    )
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        ssl_certfile=settings.tls_cert or None,
        ssl_keyfile=settings.tls_key or None,
        log_level="warning",
        server_header=False,
        # Open pages poll forever; a stop need not wait for their connections.
        timeout_graceful_shutdown=5,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
