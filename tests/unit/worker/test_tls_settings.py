"""The worker's TLS settings are checked when settings load: pairs go together, client
certificates need TLS, and every file must be a readable PEM file."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.settings import SettingsError, load_settings

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    path = tmp_path / "ok.pem"
    path.write_text(PEM)
    return path


def load(**flags: object) -> object:
    return load_settings({"master": "head:7000", "token": "t", **flags}, environ={})


def test_pairs_and_requirements(pem: Path) -> None:
    with pytest.raises(SettingsError, match="tls_cert and tls_key go together"):
        load(tls_cert=pem)
    with pytest.raises(SettingsError, match="master_client_cert and master_client_key go"):
        load(master_client_key=pem)
    with pytest.raises(SettingsError, match="tls_client_ca needs tls_cert"):
        load(tls_client_ca=pem)


def test_files_must_be_readable_pem(pem: Path, tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"^tls_key: cannot read .*absent\.key"):
        load(tls_cert=pem, tls_key=tmp_path / "absent.key")
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    with pytest.raises(SettingsError, match=r"^master_client_cert: .* is not a PEM file"):
        load(master_client_cert=notes, master_client_key=pem)


def test_environment_names_and_credentials(pem: Path) -> None:
    """HADAR_WORKER_TLS_* variables set the paths; a client certificate implies TLS."""
    settings = load_settings(
        {"master": "head:7000", "token": "t"},
        environ={
            "HADAR_WORKER_MASTER_CLIENT_CERT": str(pem),
            "HADAR_WORKER_MASTER_CLIENT_KEY": str(pem),
        },
    )
    assert settings.master_client_cert == pem
    assert settings.master_credentials() is not None
    assert settings.server_credentials() is None
