"""The master's TLS settings: pairs go together, client certificates need TLS, and a file
that cannot be used stops the master at construction with the setting's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.service.tls import server_credentials, worker_channel_credentials
from master.settings import Settings, SettingsError

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"tls_cert": "c.pem"}, "tls_cert and tls_key go together"),
        ({"tls_client_ca": "ca.pem"}, "tls_client_ca needs tls_cert"),
        ({"worker_client_cert": "c.pem"}, "worker_client_cert and worker_client_key go together"),
        (
            {"worker_client_cert": "c.pem", "worker_client_key": "k.pem"},
            "worker_client_cert needs worker_ca_file",
        ),
    ],
)
def test_inconsistent_tls_settings_are_refused(changes: dict[str, str], words: str) -> None:
    with pytest.raises(SettingsError, match=words):
        Settings(**changes)  # type: ignore[arg-type]


def test_an_unreadable_or_non_pem_file_names_its_setting(tmp_path: Path) -> None:
    pem = tmp_path / "ok.pem"
    pem.write_text(PEM)
    text = tmp_path / "notes.txt"
    text.write_text("not a certificate")
    missing = tmp_path / "missing.pem"
    with pytest.raises(SettingsError, match=r"^tls_client_ca: cannot read .*missing\.pem"):
        server_credentials(
            Settings(tls_cert=str(pem), tls_key=str(pem), tls_client_ca=str(missing))
        )
    with pytest.raises(SettingsError, match=r"^worker_ca_file: .*notes\.txt is not a PEM file"):
        worker_channel_credentials(Settings(worker_ca_file=str(text)))
    assert server_credentials(Settings()) is None
    assert worker_channel_credentials(Settings()) is None
