"""`hadar-dashboard` as its own process: HTTPS from a certificate and key (a Secure session
cookie and HSTS over it), and a clear refusal of unusable settings."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.integration.certificates import issue, make_ca
from tests.integration.cli.conftest import Cluster, running_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("dashboard-tls")) as started:
        yield started


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_dashboard_serves_https_with_a_secure_session_cookie(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Given a certificate and key, the dashboard answers over TLS only; logging in sets a
    Secure, HttpOnly, SameSite=Strict cookie, and responses carry HSTS."""
    ca = make_ca(tmp_path)
    server = issue(ca, tmp_path, "dashboard")
    port = free_port()
    argv = [sys.executable, "-m", "dashboard.cli", "--listen", f"127.0.0.1:{port}"]
    argv += ["--master", cluster.address, "--tls-cert", str(server.cert)]
    argv += ["--tls-key", str(server.key)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    context = ssl.create_default_context(cafile=str(ca.cert))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                web = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
                web.request("GET", "/healthz")
                assert web.getresponse().read() == b"ok"
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "the dashboard never answered over TLS"
                time.sleep(0.2)
        body = urlencode({"token": cluster.tokens["alice"]})
        web.request("POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"})
        answer = web.getresponse()
        answer.read()
        assert answer.status == 303
        cookie = answer.getheader("set-cookie") or ""
        assert "Secure" in cookie and "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
        assert answer.getheader("strict-transport-security", "").startswith("max-age=")
        web.close()
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        with pytest.raises((http.client.HTTPException, OSError)):
            plain.request("GET", "/healthz")
            plain.getresponse().read()
        plain.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert", "/etc/hostname"], "tls_cert and tls_key go together"),
        (["--master", "gpu-master"], "master: master address 'gpu-master' is not HOST:PORT"),
    ],
)
def test_unusable_settings_stop_the_dashboard_with_a_message(args: list[str], message: str) -> None:
    """An unusable setting exits 2 with a message that names it."""
    done = subprocess.run(
        [sys.executable, "-m", "dashboard.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr
