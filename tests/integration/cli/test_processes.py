"""hctl as a separate process: configuration from the environment and files, --watch, Ctrl-C."""

from __future__ import annotations

import itertools
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


def test_queue_watch_into_a_pipe_prints_a_line_per_change(cluster: Cluster, tmp_path: Path):
    """--watch into a pipe prints each job once and then a line only when it changes (here:
    a new job, a cancelled job leaving the active queue), never a table per refresh; Ctrl-C
    ends it with status 0."""
    env = base_env(tmp_path) | {
        "HADAR_MASTER": cluster.address,
        "HADAR_TOKEN": cluster.tokens["alice"],
    }
    common = ["--master", cluster.address, "--token", cluster.tokens["alice"]]

    def submit(name: str) -> str:
        argv = [*common, "submit", "--workload", "resnet", "--iterations", "5", "--name", name]
        assert main([*argv, "--gpus", "1"]) == 0
        return name

    submit("watched")
    process = hctl_process(["queue", "--watch", "--interval", "0.2"], env)
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    assert process.stdout is not None
    stdout = process.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    def wait_for_line(text: str) -> str:
        deadline = time.monotonic() + 60
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no line with {text!r} within a minute; saw {seen}"
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            seen.append(line)
            if text in line:
                return line

    threading.Thread(target=read, daemon=True).start()
    first = wait_for_line("(watched):")
    watched_id = first.split(" job ", 1)[1].split(" ", 1)[0]
    wait_for_line(f"({submit('second')}):")
    assert main([*common, "cancel", watched_id]) == 0
    wait_for_line(f"job {watched_id} (watched): no longer listed")
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0
    assert process.stderr is not None
    assert "Traceback" not in process.stderr.read()
    bodies = [line.split(" ", 1)[1] for line in seen]
    assert not any(a == b for a, b in itertools.pairwise(bodies)), seen
    assert not any("NODE/REASON" in line for line in seen), "a table was printed"


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
