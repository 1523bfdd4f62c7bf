"""Test certificates made with the openssl command line at test time: a CA and the leaf
certificates it signs (EC P-256, valid for a day), for 127.0.0.1 and localhost."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

CURVE = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


@dataclass(frozen=True)
class Pem:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl command is needed to make test certificates")
    subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str = "test-ca") -> Pem:
    pem = Pem(directory / f"{name}.pem", directory / f"{name}.key")
    _openssl(
        "req", "-x509", *CURVE, "-days", "1", "-subj", f"/CN={name}",
        "-keyout", str(pem.key), "-out", str(pem.cert),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return pem


def issue(ca: Pem, directory: Path, name: str) -> Pem:
    """A leaf certificate signed by `ca`, good for a server on 127.0.0.1 or localhost and
    for a client."""
    pem = Pem(directory / f"{name}.pem", directory / f"{name}.key")
    request = directory / f"{name}.csr"
    extensions = directory / f"{name}.ext"
    extensions.write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl(
        "req", "-new", *CURVE, "-subj", f"/CN={name}",
        "-keyout", str(pem.key), "-out", str(request),
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-set_serial", str(secrets.randbits(63)), "-days", "1",
        "-extfile", str(extensions), "-out", str(pem.cert),
    )  # fmt: skip
    return pem
