"""With `ca_file` in the config, the client speaks TLS and verifies the master's certificate."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import HadarClient, Unavailable
from clients.config import resolve
from master.daemon import Master
from master.settings import Settings

OPENSSL = shutil.which("openssl")


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    assert OPENSSL is not None
    subprocess.run(
        [
            OPENSSL,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return key, cert


@pytest.fixture
def tls_master(tmp_path: Path, quiet_master_logs: None) -> Iterator[tuple[Master, Path]]:
    if OPENSSL is None:
        pytest.fail("openssl is needed to make a test certificate")
    key, cert = self_signed(tmp_path, "master")
    master = Master(
        Settings(
            listen="127.0.0.1:0",
            database=f"sqlite:///{tmp_path / 'hadar.db'}",
            policy="fifo",
            cluster_token="cluster",
            cluster_token_file=str(tmp_path / "cluster-token"),
            metrics_port=-1,
            checkpoint_dir=str(tmp_path / "ckpt"),
            tls_cert=str(cert),
            tls_key=str(key),
        )
    )
    master.start()
    try:
        yield master, cert
    finally:
        master.stop(grace=1.0)


def test_tls_with_the_right_ca_works_and_a_wrong_one_is_refused(tls_master, tmp_path: Path):
    """The master's own certificate as CA: calls succeed (the token travels inside TLS);
    another CA: Unavailable."""
    master, cert = tls_master
    token = master.create_token("tess")
    config = tmp_path / "config.toml"
    config.write_text(f'master = "{master.address}"\nca_file = "{cert}"\ntoken = "{token}"\n')
    env = {"HADAR_CONFIG": str(config), "HOME": str(tmp_path)}
    with HadarClient(config=resolve(env=env)) as hadar:
        assert hadar.whoami().user == "tess"

    _, other = self_signed(tmp_path, "other")
    config.write_text(f'master = "{master.address}"\nca_file = "{other}"\ntoken = "{token}"\n')
    with (
        HadarClient(config=resolve(timeout_s=1, env=env)) as hadar,
        pytest.raises(Unavailable),
    ):
        hadar.whoami()
