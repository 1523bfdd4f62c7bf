"""The dashboard's settings, as one typed value.

Each comes from, best first: the command line, the environment (``HADAR_DASHBOARD_*``, in
the style of the master's ``HADAR_*``), the default. The master it talks to is reached like
``hctl`` reaches it (address, CA bundle and client certificate); the dashboard itself holds
no token: every call carries the logged-in user's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_PREFIX = "HADAR_DASHBOARD_"
DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_MASTER = "127.0.0.1:50051"


class SettingsError(ValueError):
    """A setting is unusable; the message names it."""


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    # host:port the web server listens on.
    listen: str = DEFAULT_LISTEN
    # The master's gRPC address (several, comma-separated, as hctl takes them).
    master: str = DEFAULT_MASTER
    # TLS to the master: the CA bundle that signed its certificate, and a client certificate
    # and key for a master that requires one (its tls_client_ca).
    master_ca_file: str = ""
    master_cert_file: str = ""
    master_key_file: str = ""
    # HTTPS for the browser (PEM files); without them the dashboard serves plain HTTP, for a
    # laptop or behind a TLS-terminating proxy.
    tls_cert: str = ""
    tls_key: str = ""
    # A session ends this long after its login, or after this long unused.
    session_ttl_s: float = 12 * 3600.0
    session_idle_s: float = 2 * 3600.0
    # Per call to the master: a page shows the outage banner rather than hang.
    call_timeout_s: float = 3.0
    # Queue rows per page.
    page_size: int = 100
    # How often an open page asks for its fresh content.
    refresh_s: float = 1.0

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])

    def validate(self) -> DashboardSettings:
        """Returns itself when every setting is usable; raises SettingsError naming the
        first that is not."""
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise SettingsError(f"listen: expected HOST:PORT such as {DEFAULT_LISTEN!r}")
        if not self.master.strip():
            raise SettingsError("master: the master's address is empty")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise SettingsError("tls_cert and tls_key go together")
        if bool(self.master_cert_file) != bool(self.master_key_file):
            raise SettingsError("master_cert_file and master_key_file go together")
        if self.master_cert_file and not self.master_ca_file:
            raise SettingsError("master_cert_file needs master_ca_file (TLS to the master)")
        for name in ("tls_cert", "tls_key", "master_ca_file", "master_cert_file"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise SettingsError(f"{name}: no such file {path}")
        for name in ("session_ttl_s", "session_idle_s", "call_timeout_s", "refresh_s"):
            if not getattr(self, name) > 0:
                raise SettingsError(f"{name}: must be more than 0")
        if not 1 <= self.page_size <= 1000:
            raise SettingsError("page_size: must be 1 to 1000")
        return self


_FIELDS = {f.name: f for f in dataclasses.fields(DashboardSettings)}


def from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``HADAR_DASHBOARD_*`` variables that name a setting, by setting name."""
    return {
        key[len(ENV_PREFIX) :].lower(): value
        for key, value in environ.items()
        if key.startswith(ENV_PREFIX) and key[len(ENV_PREFIX) :].lower() in _FIELDS
    }


def build(raw: Mapping[str, str | None], environ: Mapping[str, str]) -> DashboardSettings:
    """Settings from command-line values (None: not given) over the environment, checked."""
    merged: dict[str, str] = from_environment(environ)
    merged.update({k: v for k, v in raw.items() if v is not None})
    values: dict[str, Any] = {}
    for name, text in merged.items():
        if name not in _FIELDS:
            raise SettingsError(f"unknown setting {name!r}")
        default = _FIELDS[name].default
        try:
            if isinstance(default, float):
                values[name] = float(text)
            elif isinstance(default, int):
                values[name] = int(text)
            else:
                values[name] = text.strip()
        except ValueError:
            raise SettingsError(f"{name}: not a number: {text!r}") from None
    return DashboardSettings(**values).validate()
