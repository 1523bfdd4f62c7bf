"""The web dashboard in a real headless browser (Debian's chromium, driven by selenium through
chromedriver) against a real local cluster that `hctl local up` started with its dashboard.
One cluster and one browser serve the whole file; each page's screenshot is written as
dashboard-*.png into $HADAR_DASHBOARD_SCREENSHOTS (docs/img for docs/dashboard.md), or into
a temporary folder, so that a test run leaves the checkout as it was."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from clients.localcluster import LocalCluster, pid_alive
from clients.types import JobState
from tests.e2e.conftest import Cluster

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SHOTS = Path(
    os.environ.get("HADAR_DASHBOARD_SCREENSHOTS")
    or Path(tempfile.gettempdir()) / "hadar-dashboard-screenshots"
)
SECRET = "sk-dash-5e6f7a8b"
# A page updates within 2 s of a change; a second more for this shared machine's load.
LIVE_S = 3.0


@dataclass
class Board:
    local: LocalCluster
    url: str
    admin_token: str
    bob_token: str
    driver: webdriver.Chrome

    @functools.cached_property
    def cluster(self) -> Cluster:
        """The e2e helpers over the same local cluster (hctl with its config)."""
        return Cluster(self.local)

    def hctl(self, *args: str, token: str = "") -> subprocess.CompletedProcess[str]:
        return self.cluster.hctl(*args, token=token)

    def submit(self, *args: str) -> int:
        return self.cluster.submit_argv(*args)

    def open(self, path: str) -> None:
        self.driver.get(self.url + path)

    def log_in(self, token: str) -> None:
        self.open("/login")
        field = self.driver.find_element(By.ID, "token")
        field.clear()
        field.send_keys(token)
        self.driver.find_element(By.ID, "login-button").click()

    def text(self, element_id: str) -> str:
        """The element's text now; "" while it is absent or being swapped."""
        try:
            return str(self.driver.find_element(By.ID, element_id).text)
        except (NoSuchElementException, StaleElementReferenceException):
            return ""

    def css(self, selector: str) -> str:
        try:
            return str(self.driver.find_element(By.CSS_SELECTOR, selector).text)
        except (NoSuchElementException, StaleElementReferenceException):
            return ""

    def mark_page(self) -> None:
        """Marks the loaded document; a full reload would lose the mark."""
        self.driver.execute_script("window.hadarTestMark = 'kept';")

    def not_reloaded(self) -> bool:
        return bool(self.driver.execute_script("return window.hadarTestMark === 'kept';"))

    def shoot(self, name: str) -> None:
        height = int(self.driver.execute_script("return document.body.scrollHeight;"))
        self.driver.set_window_size(1280, min(max(height + 140, 700), 2600))
        SHOTS.mkdir(parents=True, exist_ok=True)
        assert self.driver.save_screenshot(str(SHOTS / f"dashboard-{name}.png"))
        self.driver.set_window_size(1280, 900)


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def browser() -> webdriver.Chrome:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: `make browser` installs Debian's chromium and "
            "chromium-driver (as root), or run `apt-get install chromium chromium-driver`"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def board() -> Iterator[Board]:
    top = Path(tempfile.mkdtemp(prefix="hadar-dashboard-"))
    local = LocalCluster(top / "cluster")
    up = subprocess.run(
        [
            sys.executable,
            "-m",
            "clients.cli.main",
            "local",
            "up",
            "--state-dir",
            str(local.state_dir),
            "--workers",
            "v100:2;k80:1",
            "--policy",
            "fifo",
            "--round-seconds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    driver: webdriver.Chrome | None = None
    try:
        assert up.returncode == 0, up.stderr
        found = re.search(r"dashboard: (http://\S+)", up.stdout)
        assert found is not None, up.stdout
        with local.client() as admin:
            bob = admin.create_token("bob").token
            admin_token = admin.config.token or ""
        driver = browser()
        yield Board(local, found.group(1), admin_token, bob, driver)
    finally:
        if driver is not None:
            driver.quit()
        record = local.record()
        down = subprocess.run(
            [
                sys.executable,
                "-m",
                "clients.cli.main",
                "local",
                "down",
                "--state-dir",
                str(local.state_dir),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(top, ignore_errors=True)
        assert down.returncode == 0, down.stderr
        # `hctl local down` stops the dashboard with the rest.
        if record is not None and record.dashboard is not None:
            assert not pid_alive(record.dashboard.pid)


def test_a_wrong_token_is_refused(board: Board) -> None:
    """A token the master does not know gets the login page back with an error, and no page
    opens after it."""
    board.log_in("hdr_this-is-not-a-token")
    wait_for(lambda: board.text("login-error"), 10, "the login error")
    assert "not accepted" in board.text("login-error")
    board.shoot("login")
    board.open("/cluster")
    assert board.driver.current_url.endswith("/login")


def test_hctl_local_status_names_the_dashboard(board: Board) -> None:
    """`hctl local status --json` gives the URL `hctl local up` printed."""
    done = board.hctl("local", "status", "--json", "--state-dir", str(board.local.state_dir))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dashboard"] == board.url


def test_login_and_the_cluster_page_shows_every_gpu(board: Board) -> None:
    """The admin logs in with their token and sees all three GPUs of the two workers."""
    board.log_in(board.admin_token)
    wait_for(lambda: board.driver.current_url.endswith("/cluster"), 10, "the cluster page")
    gpus = {
        str(row.get_attribute("data-gpu"))
        for row in board.driver.find_elements(By.CSS_SELECTOR, "tr.gpu")
    }
    assert gpus == {"local-1/0", "local-1/1", "local-2/0"}
    assert "(admin)" in board.text("whoami")


def test_a_submitted_job_appears_starts_and_progresses_without_a_reload(board: Board) -> None:
    """With the queue page open, a job submitted with hctl appears, starts and progresses on
    it, and then on its own page, with no reload of either page."""
    board.open("/queue")
    board.mark_page()
    job = board.submit(
        "--name", "recsys-demo", "--workload", "recommendation", "--iterations", "1000000"
    )
    row = f'tr[data-job="{job}"]'
    wait_for(lambda: board.css(row), LIVE_S, f"job {job} on the queue page")
    wait_for(lambda: "running" in board.css(f"{row} td.state"), 60, f"job {job} to run")
    first = int(board.css(f"{row} .iterations") or 0)
    wait_for(
        lambda: int(board.css(f"{row} .iterations") or 0) > first, 60, f"job {job} to progress"
    )
    assert board.not_reloaded()
    board.shoot("queue")

    board.open(f"/jobs/{job}")
    board.mark_page()
    start = int(board.text("iterations") or 0)
    wait_for(lambda: int(board.text("iterations") or 0) > start, 30, "progress on the job page")
    assert board.text("job-state") == "running"
    assert "local-" in board.text("placement")
    assert "scheduled" in board.text("events")
    # Three samples make the progress chart, drawn by uPlot under the page's CSP.
    wait_for(lambda: board.driver.find_elements(By.CSS_SELECTOR, ".uplot"), 30, "the chart")
    assert board.not_reloaded()
    board.shoot("job")

    board.open("/cluster")
    wait_for(lambda: board.css(f'tr.gpu a[href="/jobs/{job}"]'), LIVE_S, "the job on its GPU")
    board.shoot("cluster")


def test_another_users_job_shows_no_output_or_command(board: Board) -> None:
    """Bob, logged in with his own token, sees the admin's job on the queue and its page,
    but never its command, environment or output, which the admin does see."""
    job = board.submit(
        "--name",
        "private-run",
        "--iterations",
        "1",
        "--env",
        f"API_KEY={SECRET}",
        "--",
        sys.executable,
        "-c",
        f"print('{SECRET}-in-output')",
    )
    with board.local.client() as admin:
        wait_for(
            lambda: admin.get_job(job).state is JobState.COMPLETED, 60, f"job {job} to complete"
        )
    board.open(f"/jobs/{job}")
    wait_for(lambda: f"{SECRET}-in-output" in board.text("log"), 10, "the owner's log tail")

    board.driver.delete_all_cookies()
    board.log_in(board.bob_token)
    wait_for(lambda: "bob" in board.text("whoami"), 10, "bob's login")
    board.open(f"/jobs/{job}")
    wait_for(lambda: board.text("job-state") == "completed", 10, "the job page")
    page = board.driver.page_source
    assert SECRET not in page
    assert "API_KEY" not in page
    assert "only its owner sees what it runs" in board.text("program")
    assert board.driver.find_elements(By.ID, "log") == []
    board.shoot("job-other-user")
    board.open("/queue?state=completed")
    wait_for(lambda: board.css(f'tr[data-job="{job}"]'), 10, "the job on bob's queue")
    assert SECRET not in board.driver.page_source


def test_an_unknown_job_is_a_404_page(board: Board) -> None:
    """A job id nobody has shows the error page, not a stack trace."""
    board.open("/jobs/424242")
    assert "not found" in board.text("error").lower()
    assert "Traceback" not in board.driver.page_source


def test_users_and_history_pages_draw_their_charts(board: Board) -> None:
    """The users and history pages (here as bob sees them) render their tables and uPlot
    charts, and the browser reports no Content-Security-Policy violation on any page."""
    board.open("/users")
    wait_for(lambda: board.text("fair-share"), 10, "the fair-share table")
    board.shoot("users")
    board.open("/history")
    wait_for(lambda: board.driver.find_elements(By.CSS_SELECTOR, ".uplot"), 10, "the charts")
    board.shoot("history")
    logs = board.driver.get_log("browser")  # type: ignore[no-untyped-call]
    violations = [e["message"] for e in logs if "Content Security Policy" in e["message"]]
    assert violations == []
