"""The dashboard in-process (Starlette's test client) against a real master (in-process gRPC,
SQLite, token auth) with two fake-GPU workers: login, the pages, privacy between users, the
security headers, and what a page shows when something goes wrong."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from clients.types import JobSpec, Program
from dashboard.app import create_app
from dashboard.sessions import COOKIE_NAME
from dashboard.settings import DashboardSettings
from tests.integration.cli.conftest import Cluster, running_cluster

SECRET = "sk-live-0a1b2c3d"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("dashboard")) as started:
        yield started


def browser(master: str) -> TestClient:
    # Long enough for a page's calls on a busy test machine (a call past it shows the
    # outage banner instead of the page); an absent master is refused at once anyway.
    settings = DashboardSettings(master=master, call_timeout_s=10.0)
    return TestClient(create_app(settings), base_url="http://testserver")


def logged_in(cluster: Cluster, user: str) -> TestClient:
    web = browser(cluster.address)
    answer = web.post("/login", data={"token": cluster.tokens[user]}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    return web


def submit_as(cluster: Cluster, user: str, spec: JobSpec) -> int:
    from clients.client import HadarClient

    with HadarClient(cluster.address, token=cluster.tokens[user], timeout=5.0) as client:
        return client.submit_job(spec).id


def test_login_sets_a_private_session_cookie_and_a_wrong_token_is_refused(
    cluster: Cluster,
) -> None:
    """A good token logs in with an HttpOnly, SameSite=Strict session cookie that is not the
    token; a wrong one gets the login page again with 401 and no cookie."""
    web = browser(cluster.address)
    wrong = web.post("/login", data={"token": "hdr_not-a-token"}, follow_redirects=False)
    assert wrong.status_code == 401
    assert "not accepted" in wrong.text
    assert COOKIE_NAME not in wrong.cookies

    good = web.post("/login", data={"token": cluster.tokens["alice"]}, follow_redirects=False)
    assert good.status_code == 303
    cookie = good.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert "Secure" not in cookie  # plain HTTP here
    assert cluster.tokens["alice"] not in cookie
    page = web.get("/cluster")
    assert page.status_code == 200
    assert 'id="whoami">alice' in page.text


def test_many_wrong_tokens_are_throttled(cluster: Cluster) -> None:
    """After ten wrong tokens from one address, even the right one waits (429)."""
    web = browser(cluster.address)
    for _ in range(10):
        assert web.post("/login", data={"token": "hdr_guess"}).status_code == 401
    held = web.post("/login", data={"token": cluster.tokens["alice"]})
    assert held.status_code == 429
    assert "too many failed logins" in held.text


def test_pages_need_a_login_and_htmx_polls_are_sent_to_it(cluster: Cluster) -> None:
    """Without a session a page redirects to the login page; an htmx poll gets HX-Redirect."""
    web = browser(cluster.address)
    page = web.get("/queue", follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"] == "/login"
    poll = web.get("/queue", headers={"HX-Request": "true"}, follow_redirects=False)
    assert poll.headers["HX-Redirect"] == "/login"


def test_every_response_carries_the_security_headers(cluster: Cluster) -> None:
    """Pages, the login page and static files forbid inline script and framing."""
    web = logged_in(cluster, "alice")
    for path in ("/login", "/cluster", "/static/htmx.min.js", "/jobs/999999"):
        answer = web.get(path)
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "no-referrer"
    assert web.get("/cluster").headers["cache-control"] == "no-store"
    # No page carries an inline script: every <script> names a file of the dashboard's.
    for path in ("/login", "/cluster", "/queue", "/users", "/history"):
        text = web.get(path).text
        assert text.count("<script") == text.count('<script src="/static/')


def test_the_cluster_page_shows_every_gpu_with_its_job_and_user(cluster: Cluster) -> None:
    """All four GPUs of the two workers appear, grouped by type; a running job's GPU names
    its job and user."""
    job_id = submit_as(cluster, "bob", JobSpec("cl", Program.builtin("resnet"), iterations=10**6))
    cluster.round()
    page = logged_in(cluster, "alice").get("/cluster")
    for gpu in ("gpu-a/0", "gpu-a/1", "gpu-b/0", "gpu-b/1"):
        assert f'data-gpu="{gpu}"' in page.text
    assert "<h2>k80" in page.text and "<h2>v100" in page.text
    assert f'href="/jobs/{job_id}"' in page.text
    assert "<td>bob</td>" in page.text


def test_a_drained_node_is_named_on_the_cluster_page(cluster: Cluster) -> None:
    """A node an admin drains shows in the banner with its state and reason, and its GPUs'
    rows say so."""
    from clients.client import HadarClient

    with HadarClient(cluster.address, token=cluster.tokens["root"], timeout=5.0) as admin:
        admin.drain_node("gpu-b", "fan replacement")
        try:
            page = logged_in(cluster, "alice").get("/cluster")
        finally:
            admin.resume_node("gpu-b")
    assert page.status_code == 200, page.text
    banner = page.text.split('id="troubled"')[1].split("</div>\n</div>")[0]
    assert "gpu-b" in banner and "fan replacement" in banner
    assert "drain" in banner
    assert 'class="gpu drain' in page.text


def test_another_users_job_shows_no_command_environment_or_output(cluster: Cluster) -> None:
    """Bob sees alice's job as the queue shows it, never its command or environment; alice
    sees her own."""
    spec = JobSpec(
        "private",
        Program.command(["python", "-c", f"print('{SECRET}')"]),
        env={"API_KEY": SECRET},
    )
    job_id = submit_as(cluster, "alice", spec)
    as_bob = logged_in(cluster, "bob").get(f"/jobs/{job_id}")
    assert as_bob.status_code == 200
    assert SECRET not in as_bob.text
    assert "API_KEY" not in as_bob.text
    assert "only its owner sees what it runs" in as_bob.text
    assert 'id="log"' not in as_bob.text
    as_alice = logged_in(cluster, "alice").get(f"/jobs/{job_id}")
    assert SECRET in as_alice.text
    assert "API_KEY" in as_alice.text
    assert 'id="log"' in as_alice.text


def test_the_queue_filters_by_user_and_state_and_folds_arrays(cluster: Cluster) -> None:
    """A user filter shows that user's jobs only; an array's pending elements are one line,
    and each element has its page (`12_3`); an unknown state is a 400 naming the parameter."""
    array = submit_as(
        cluster,
        "alice",
        JobSpec("sweep", Program.builtin("resnet"), iterations=100, array="0-5", num_gpus=4),
    )
    web = logged_in(cluster, "bob")
    mine = web.get("/queue", params={"user": "alice", "state": "pending"})
    assert mine.status_code == 200
    assert f'data-job="{array}_[0-5]"' in mine.text
    assert "<td>bob</td>" not in mine.text
    element = web.get(f"/jobs/{array}_2")
    assert element.status_code == 200
    assert f"Job {array}_2" in element.text
    assert web.get(f"/jobs/{array}_9").status_code == 404
    bad = web.get("/queue", params={"state": "sleeping"})
    assert bad.status_code == 400
    assert "state: &#39;sleeping&#39; is no job state" in bad.text


def test_a_poll_gets_only_the_live_part(cluster: Cluster) -> None:
    """With HX-Request the answer is the polled section alone, which polls its own URL."""
    web = logged_in(cluster, "alice")
    poll = web.get("/queue", params={"user": "alice"}, headers={"HX-Request": "true"})
    assert poll.text.lstrip().startswith('<section id="live"')
    assert 'hx-get="/queue?user=alice"' in poll.text
    assert "<html" not in poll.text


def test_unknown_and_malformed_job_ids(cluster: Cluster) -> None:
    """An unknown job is a 404 page; an id that is no id is a 400 that says so."""
    web = logged_in(cluster, "alice")
    missing = web.get("/jobs/987654")
    assert missing.status_code == 404
    assert 'id="error"' in missing.text
    assert web.get("/jobs/abc").status_code == 400
    assert web.get("/no/such/page").status_code == 404


def test_users_and_history_pages_render_the_accounting(cluster: Cluster) -> None:
    """The users page lists the fair-share rows; the history page carries its charts' data
    as attributes for the page's own script."""
    web = logged_in(cluster, "alice")
    users = web.get("/users")
    assert users.status_code == 200
    assert 'id="fair-share"' in users.text
    history = web.get("/history")
    assert history.status_code == 200
    assert "data-chart='" in history.text
    assert 'hx-trigger="every 10.0s"' in history.text


def test_logout_ends_the_session(cluster: Cluster) -> None:
    """After logging out the old cookie opens nothing."""
    web = logged_in(cluster, "alice")
    page = web.get("/cluster")
    key = page.text.split('name="form_key" value="')[1].split('"')[0]
    web.post("/logout", data={"form_key": key}, follow_redirects=False)
    assert web.get("/cluster", follow_redirects=False).status_code == 303


def test_a_revoked_token_sends_the_user_back_to_the_login_page(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A session whose token the admin revokes is closed at its next page."""
    from clients.client import HadarClient

    with HadarClient(cluster.address, token=cluster.tokens["root"], timeout=5.0) as admin:
        created = admin.create_token("carol")
        web = browser(cluster.address)
        web.post("/login", data={"token": created.token})
        assert web.get("/cluster").status_code == 200
        admin.revoke_token(created.info.id)
    page = web.get("/cluster", follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"] == "/login?expired=1"


def test_master_down_is_a_banner_not_a_stack_trace() -> None:
    """With nothing listening at the master's address, logging in and polling show the
    outage banner."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    web = browser(f"127.0.0.1:{port}")
    answer = web.post("/login", data={"token": "hdr_anything"})
    assert answer.status_code == 503
    assert 'id="outage"' in answer.text
    assert "Traceback" not in answer.text


def test_the_dashboard_never_loads_the_master_or_the_store() -> None:
    """The dashboard is a client only: importing its app loads neither master nor store."""
    code = (
        "import sys, dashboard.app, dashboard.cli;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('master', 'store', 'sqlalchemy')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_master_that_goes_away_is_a_banner_on_open_pages(tmp_path: Path) -> None:
    """Logged in, then the master stops: a page is a 503 with the outage banner, and a poll
    gets the banner inside a section that keeps polling."""
    with running_cluster(tmp_path) as own:
        web = logged_in(own, "alice")
        assert web.get("/queue").status_code == 200
        own.master.stop(grace=0.5)
        page = web.get("/queue")
        assert page.status_code == 503
        assert 'id="outage"' in page.text
        assert "Traceback" not in page.text
        poll = web.get("/queue", headers={"HX-Request": "true"})
        assert poll.status_code == 200
        assert poll.text.lstrip().startswith('<section id="live"')
        assert 'id="outage"' in poll.text
