"""The shipped systemd units pass `systemd-analyze verify` and keep the settings the daemons
rely on (notify, the worker's jobs surviving an agent restart, GPU access)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS_DIR = Path(__file__).resolve().parents[2] / "systemd"
UNITS = ("hadar-master.service", "hadar-worker.service", "hadar-dashboard.service")
INSTALLED_PREFIX = "/opt/hadar/venv/bin/"


def settings(unit: str) -> dict[str, list[str]]:
    """Every `Key=value` of the unit, values in order of appearance."""
    found: dict[str, list[str]] = {}
    for line in (UNITS_DIR / unit).read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z]+)=(.*)", line.strip())
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """Copies of the units whose commands point at this environment's executables verify
    without a single message about them (unknown keys, bad values, missing binaries)."""
    scripts = Path(sys.executable).parent
    copies = []
    for unit in UNITS:
        text = (UNITS_DIR / unit).read_text()
        assert INSTALLED_PREFIX in text, f"{unit} runs the installed {INSTALLED_PREFIX}..."
        for name in ("hadar-master", "hadar-worker", "hadar-dashboard"):
            if INSTALLED_PREFIX + name in text:
                assert (scripts / name).is_file(), f"{scripts / name} is not installed"
        copy = tmp_path / unit
        copy.write_text(text.replace(INSTALLED_PREFIX, f"{scripts}/"))
        copies.append(str(copy))
    result = subprocess.run(
        ["systemd-analyze", "verify", *copies],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    about_ours = [line for line in output.splitlines() if any(u in line for u in UNITS)]
    assert about_ours == [], output


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a misspelled key in a copy is reported."""
    scripts = Path(sys.executable).parent
    text = (UNITS_DIR / "hadar-master.service").read_text()
    broken = text.replace(INSTALLED_PREFIX, f"{scripts}/").replace(
        "ProtectHome=yes", "ProtectHomes=yes"
    )
    copy = tmp_path / "hadar-master.service"
    copy.write_text(broken)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Unknown key 'ProtectHomes'" in result.stdout + result.stderr


def test_master_unit_is_notify_with_state_and_hardening() -> None:
    """The master is Type=notify, restarts on failure, keeps its state in a StateDirectory
    and runs sandboxed with only the network and that directory."""
    unit = settings("hadar-master.service")
    assert unit["Type"] == ["notify"]
    assert unit["Restart"] == ["on-failure"]
    assert unit["StateDirectory"] == ["hadar-master"]
    for key in (
        "NoNewPrivileges",
        "PrivateTmp",
        "ProtectHome",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectControlGroups",
    ):
        assert unit[key] == ["yes"], key
    assert unit["ProtectSystem"] == ["strict"]
    assert set(unit["RestrictAddressFamilies"][0].split()) == {"AF_INET", "AF_INET6", "AF_UNIX"}


def test_worker_unit_keeps_jobs_across_agent_restarts_and_sees_gpus() -> None:
    """The worker is Type=notify with a watchdog, signals only the agent on stop
    (KillMode=process) so jobs outlive it, delegates its cgroup, and lets jobs open the
    NVIDIA devices."""
    unit = settings("hadar-worker.service")
    assert unit["Type"] == ["notify"]
    assert float(unit["WatchdogSec"][0]) > 0
    assert unit["KillMode"] == ["process"]
    assert unit["Delegate"] == ["yes"]
    assert unit["Restart"] == ["on-failure"]
    assert "PrivateDevices" not in unit
    assert "char-nvidia* rw" in unit["DeviceAllow"]
    for forbidden in ("ProtectHome", "ProtectSystem", "NoNewPrivileges"):
        assert forbidden not in unit, f"{forbidden} would apply to the jobs too"
