"""A local cluster's credentials: a private cluster token and an admin token in a private
hctl config, made with `hadar-master token create` against the cluster's own database."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from clients.config import load_file
from clients.localcluster import LocalCluster, invoking_user
from store import Database


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_credentials_are_private_and_the_token_is_the_users_admin_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both files are mode 0600; the config names the master and holds a token that the
    database authenticates as an admin token of the invoking user. HADAR_CONFIG naming that
    very config (as the printed hint suggests) does not reach the master's tools, which
    would read it as their own settings file."""
    cluster = LocalCluster(tmp_path / "local")
    cluster.state_dir.mkdir()
    monkeypatch.setenv("HADAR_CONFIG", str(cluster.config_path))
    cluster.prepare_credentials("127.0.0.1:50123")

    assert _mode(cluster.cluster_token_path) == 0o600
    assert _mode(cluster.config_path) == 0o600
    assert len(cluster.cluster_token_path.read_text().strip()) >= 32
    config = load_file(cluster.config_path)
    assert config["master"] == "127.0.0.1:50123"
    token = config["token"]
    assert isinstance(token, str)
    database = Database(cluster.database_url)
    try:
        with database.transaction() as uow:
            info = uow.tokens.authenticate(token)
    finally:
        database.dispose()
    assert info is not None
    assert (info.user, info.admin) == (invoking_user(), True)


def test_a_restart_keeps_both_tokens_and_follows_the_new_port(tmp_path: Path) -> None:
    """Starting again from the same state dir reuses the cluster token and the admin token
    (the database still knows it) and rewrites the master's address; a token file that was
    left readable by others is made private again."""
    cluster = LocalCluster(tmp_path / "local")
    cluster.state_dir.mkdir()
    cluster.prepare_credentials("127.0.0.1:50123")
    cluster_token = cluster.cluster_token_path.read_text()
    admin_token = load_file(cluster.config_path)["token"]
    cluster.config_path.chmod(0o644)

    cluster.prepare_credentials("127.0.0.1:50124")

    assert cluster.cluster_token_path.read_text() == cluster_token
    config = load_file(cluster.config_path)
    assert (config["master"], config["token"]) == ("127.0.0.1:50124", admin_token)
    assert _mode(cluster.config_path) == 0o600


def test_a_new_database_gets_a_new_admin_token(tmp_path: Path) -> None:
    """A config whose database is gone holds a token nobody knows: a fresh one is made."""
    cluster = LocalCluster(tmp_path / "local")
    cluster.state_dir.mkdir()
    cluster.prepare_credentials("127.0.0.1:50123")
    old = load_file(cluster.config_path)["token"]
    for path in cluster.state_dir.glob("hadar.db*"):
        path.unlink()

    cluster.prepare_credentials("127.0.0.1:50123")

    assert load_file(cluster.config_path)["token"] != old
