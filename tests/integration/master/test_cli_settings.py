"""`hadar-master` subcommands and the settings precedence."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from master.cli import main
from master.settings import Settings, SettingsError, load
from store import Database
from store.migrate import current, head
from store.testing import backends, temporary_database_url


@pytest.mark.parametrize("backend", backends())
def test_db_commands_migrate_both_ways(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """db upgrade reaches head, db current reports it, db downgrade empties the schema."""
    with temporary_database_url(backend, tmp_path) as url:
        assert main(["db", "upgrade", "--database", url]) == 0
        assert capsys.readouterr().out.startswith(f"{head()} (up to date)")
        assert main(["db", "current", "--database", url]) == 0
        assert head() in capsys.readouterr().out
        assert main(["db", "downgrade", "--database", url]) == 0
        database = Database(url)
        try:
            assert current(database.url, engine=database.engine) is None
        finally:
            database.dispose()


def test_token_commands_issue_list_and_revoke(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """token create prints the plaintext once; list shows the id, never the token."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert main(["token", "create", "--user", "alice", "--admin", "--database", url]) == 0
    plaintext = capsys.readouterr().out.strip()
    assert plaintext.startswith("hdr_")
    assert main(["token", "list", "--database", url]) == 0
    listing = capsys.readouterr().out
    assert "alice" in listing and "admin" in listing and plaintext not in listing
    token_id = listing.split()[0]
    assert main(["token", "revoke", token_id, "--database", url]) == 0
    assert main(["token", "revoke", "nope", "--database", url]) == 1
    database = Database(url)
    try:
        with database.transaction() as uow:
            assert uow.tokens.authenticate(plaintext) is None
    finally:
        database.dispose()


def test_settings_precedence_defaults_file_environment_flags(tmp_path: Path) -> None:
    """Flags beat HADAR_* variables, which beat the file, which beats the defaults."""
    config = tmp_path / "master.toml"
    config.write_text(
        '[master]\nround_seconds = 30\npolicy = "las"\nlisten = "0.0.0.0:6000"\n'
        "gpu_speeds = { v100 = 3.5 }\n"
    )
    settings = load(
        config,
        environ={"HADAR_POLICY": "srtf", "HADAR_MAX_RETRIES": "7"},
        overrides={"listen": "127.0.0.1:0", "round_seconds": None},
    )
    assert settings.round_seconds == 30
    assert settings.policy == "srtf"
    assert settings.max_retries == 7
    assert settings.listen == "127.0.0.1:0"
    assert dict(settings.gpu_speeds) == {"v100": 3.5}
    assert load(environ={}).heartbeat_timeout_s == Settings().heartbeat_timeout_s


def test_state_directory_sets_database_and_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under systemd ($STATE_DIRECTORY) the defaults live there; otherwise in the cwd."""
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path))
    settings = load(environ={})
    assert settings.database == f"sqlite:///{tmp_path / 'hadar.db'}"
    assert settings.checkpoint_dir == str(tmp_path / "checkpoints")
    assert settings.cluster_token_file == str(tmp_path / "cluster-token")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"HADAR_ROUND_SECONDS": "soon"}, "round_seconds"),
        ({"HADAR_ROUND_SECONDS": "0"}, "round_seconds must be > 0"),
        ({"HADAR_AUTH": "maybe"}, "auth must be one of"),
        ({"HADAR_HEARTBEAT_TIMEOUT_S": "1", "HADAR_HEARTBEAT_INTERVAL_S": "5"}, "heartbeat"),
        ({"HADAR_LEADER_RENEW_S": "0"}, "leader_renew_s must be > 0"),
        (
            {"HADAR_LEADER_LEASE_S": "5", "HADAR_LEADER_RENEW_S": "3"},
            "leader_lease_s must be at least twice leader_renew_s",
        ),
    ],
)
def test_bad_settings_name_the_setting(values: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load(environ=values)


def test_unknown_key_in_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "m.toml"
    config.write_text("round_secs = 5\n")
    with pytest.raises(SettingsError, match="unknown setting 'round_secs'"):
        load(config, environ={})


def test_run_refuses_an_unknown_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "run",
            "--database",
            f"sqlite:///{tmp_path / 'x.db'}",
            "--policy",
            "nope",
            "--metrics-port",
            "-1",
        ]
    )
    assert code == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err


def test_run_refuses_a_policy_variant_that_forks_every_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """hadare's paper variant forks every job whatever its owner allowed: the simulator
    runs it, the master refuses to start with it, saying which jobs it may fork."""
    config = tmp_path / "m.toml"
    config.write_text('policy = "hadare"\n\n[policy_params]\nvariant = "paper"\n')
    code = main(
        [
            "run",
            "--config",
            str(config),
            "--database",
            f"sqlite:///{tmp_path / 'x.db'}",
            "--metrics-port",
            "-1",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "forks every job" in err and "--elastic" in err
    assert not (tmp_path / "x.db").exists()


def test_run_with_an_unreachable_database_prints_one_line(tmp_path: Path) -> None:
    """hadar-master run exits 1 with one line naming the database (no password), the cause
    and the setting to fix, instead of a traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADAR_")}
    env["HADAR_DATABASE_WAIT_S"] = "0.2"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "master.cli",
            "run",
            "--database",
            "postgresql://hadar:s3cret@127.0.0.1:1/hadar",
            "--listen",
            "127.0.0.1:0",
            "--cluster-token",
            "t",
            "--metrics-port",
            "-1",
            "--log-format",
            "json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    (line,) = [text for text in done.stderr.splitlines() if text.startswith("hadar-master:")]
    assert "cannot reach the database postgresql+psycopg://hadar:***@127.0.0.1:1/hadar" in line
    assert "setting `database`" in line
    assert "Traceback" not in done.stderr and "s3cret" not in done.stderr
