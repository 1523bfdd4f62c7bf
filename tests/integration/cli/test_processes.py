"""hctl as a separate process: configuration from the environment and files, --watch, Ctrl-C."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from clients.cli.main import main
from tests.integration.cli.conftest import Cluster

REPO = Path(__file__).resolve().parents[3]


def hctl_process(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "clients.cli.main", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADAR_")}
    env["HADAR_CONFIG"] = os.devnull  # no config file of the machine leaks in
    return env


def test_environment_selects_master_and_token(cluster: Cluster, tmp_path: Path):
    """HADAR_MASTER and HADAR_TOKEN are enough; whoami names the token's user and source."""
    env = base_env(tmp_path) | {
        "HADAR_MASTER": cluster.address,
        "HADAR_TOKEN": cluster.tokens["bob"],
    }
    done = subprocess.run(
        [sys.executable, "-m", "clients.cli.main", "whoami"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"bob (user) at {cluster.address}, token from HADAR_TOKEN\n"


def test_config_file_under_xdg_config_home(cluster: Cluster, tmp_path: Path, monkeypatch, capsys):
    """With no flags or variables, ~/.config/hadar/config.toml (XDG) supplies both."""
    token_file = tmp_path / "token"
    token_file.write_text(cluster.tokens["root"] + "\n")
    config = tmp_path / "xdg" / "hadar" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'master = "{cluster.address}"\ntoken_file = "{token_file}"\ntimeout = 5\n')
    for name in ("HADAR_MASTER", "HADAR_TOKEN", "HADAR_TIMEOUT", "HADAR_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert main(["whoami"]) == 0
    assert capsys.readouterr().out == f"root (admin) at {cluster.address}, token from {config}\n"


def test_queue_watch_redraws_until_interrupted(cluster: Cluster, tmp_path: Path):
    """--watch prints a fresh table every interval; Ctrl-C ends it with status 0."""
    env = base_env(tmp_path) | {
        "HADAR_MASTER": cluster.address,
        "HADAR_TOKEN": cluster.tokens["alice"],
    }
    assert (
        main(
            [
                "--master",
                cluster.address,
                "--token",
                cluster.tokens["alice"],
                "submit",
                "--workload",
                "resnet",
                "--iterations",
                "5",
                "--name",
                "watched",
            ]
        )
        == 0
    )
    process = hctl_process(["queue", "--watch", "--interval", "0.2"], env)
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    tables = 0
    deadline = time.monotonic() + 60
    while tables < 2:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "fewer than two redraws within a minute"
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        if "watched" in line:
            tables += 1
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0
    assert process.stderr is not None
    assert "Traceback" not in process.stderr.read()


def test_unreachable_master_from_a_process(tmp_path: Path):
    """The same one-line error and exit 5 when run as a program."""
    env = base_env(tmp_path) | {"HADAR_MASTER": "127.0.0.1:1", "HADAR_TIMEOUT": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "clients.cli.main", "status"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 5
    assert done.stderr.startswith("error: cannot reach the master at 127.0.0.1:1")
    assert done.stderr.count("\n") == 1
