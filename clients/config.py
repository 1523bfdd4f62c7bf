"""Where the client finds the master and its token.

Each setting comes from, best first: the argument, the environment (``HADAR_MASTER``,
``HADAR_TOKEN``, ``HADAR_TIMEOUT``), the config file
(``$XDG_CONFIG_HOME/hadar/config.toml``, by default ``~/.config/hadar/config.toml``), and the
default. The config file is TOML with top-level keys::

    master = "gpu-master.lab.example:50051"
    token = "hdr_..."        # or token_file = "~/.hadar-token"
    timeout = 10             # seconds per call
    ca_file = "/etc/hadar/ca.pem"   # use TLS with this CA bundle
    cert_file = "~/.hadar/client.pem"   # a client certificate, for a master that requires
    key_file = "~/.hadar/client.key"    # one (tls_client_ca); needs ca_file
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from protos.numbers import SECONDS_MAX, NumberRange

DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_TIMEOUT_S = 10.0
# As hctl's --timeout takes it.
TIMEOUTS = NumberRange(0, SECONDS_MAX, above=True)
ENV_MASTER = "HADAR_MASTER"
ENV_TOKEN = "HADAR_TOKEN"
ENV_TIMEOUT = "HADAR_TIMEOUT"
ENV_CONFIG = "HADAR_CONFIG"
_KNOWN_KEYS = frozenset(
    {"master", "token", "token_file", "timeout", "ca_file", "cert_file", "key_file"}
)


class ConfigError(ValueError):
    """The config file or an environment variable holds something unusable."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    address: str
    token: str | None
    timeout_s: float
    # PEM bundle to verify the master's certificate; None: plaintext.
    ca_file: Path | None
    # Where each setting came from ("argument", "HADAR_MASTER", the file path, "default").
    address_source: str
    token_source: str
    # Client certificate and key (PEM) for a master that requires one; both or neither.
    cert_file: Path | None = None
    key_file: Path | None = None


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The config file the client reads (it need not exist)."""
    environ = os.environ if env is None else env
    explicit = environ.get(ENV_CONFIG)
    if explicit:
        return Path(explicit).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or ""
    root = (
        Path(base).expanduser() if base else Path(environ.get("HOME", "~")).expanduser() / ".config"
    )
    return root / "hadar" / "config.toml"


def load_file(path: Path, *, required_by: str | None = None) -> dict[str, object]:
    """The config file's settings; empty when it does not exist, unless ``required_by`` names
    the setting that asked for this file (then a missing file is an error naming both)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required_by is not None:
            raise ConfigError(f"{required_by}={path}: no such config file") from None
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    # Loaded only when there is a file to parse: many users have none.
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KNOWN_KEYS))})"
        )
    return data


def resolve(
    address: str | None = None,
    token: str | None = None,
    timeout_s: float | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> ClientConfig:
    """Settles every setting by precedence: argument, environment, config file, default."""
    environ = os.environ if env is None else env
    path = config_path(environ)
    file = load_file(path, required_by=ENV_CONFIG if environ.get(ENV_CONFIG) else None)
    source_file = str(path)

    addr, addr_source = _pick(
        address, environ.get(ENV_MASTER), _str(file, "master", path), source_file, ENV_MASTER
    )
    if addr is None:
        addr, addr_source = DEFAULT_ADDRESS, "default"
    addr = _masters_target(addr, addr_source)
    _check_address(addr, addr_source)

    file_token = _str(file, "token", path)
    token_file = _str(file, "token_file", path)
    if file_token is None and token_file is not None:
        file_token = _read_token_file(Path(token_file).expanduser(), path)
    tok, tok_source = _pick(token, environ.get(ENV_TOKEN), file_token, source_file, ENV_TOKEN)
    if tok is None:
        tok_source = "none"

    timeout, timeout_source = timeout_s, "--timeout"
    if timeout is None:
        timeout, timeout_source = _float(environ.get(ENV_TIMEOUT), ENV_TIMEOUT), ENV_TIMEOUT
    if timeout is None and "timeout" in file:
        raw = file["timeout"]
        if not isinstance(raw, int | float) or isinstance(raw, bool):
            raise ConfigError(f"{path}: timeout must be a number of seconds")
        timeout, timeout_source = float(raw), f"{path}: timeout"
    if timeout is None:
        timeout = DEFAULT_TIMEOUT_S
    if not math.isfinite(timeout) or timeout not in TIMEOUTS:
        raise ConfigError(f"{timeout_source} {timeout:g} is out of range: {TIMEOUTS} seconds")

    ca = _str(file, "ca_file", path)
    cert = _str(file, "cert_file", path)
    key = _str(file, "key_file", path)
    if bool(cert) != bool(key):
        raise ConfigError(f"{path}: cert_file and key_file go together")
    if cert and not ca:
        raise ConfigError(f"{path}: cert_file needs ca_file (client certificates need TLS)")
    return ClientConfig(
        address=addr,
        token=tok or None,
        timeout_s=timeout,
        ca_file=Path(ca).expanduser() if ca else None,
        address_source=addr_source,
        token_source=tok_source,
        cert_file=Path(cert).expanduser() if cert else None,
        key_file=Path(key).expanduser() if key else None,
    )


def _pick(
    argument: str | None, from_env: str | None, from_file: str | None, file_name: str, env_name: str
) -> tuple[str | None, str]:
    if argument:
        return argument, "argument"
    if from_env:
        return from_env, env_name
    if from_file:
        return from_file, file_name
    return None, ""


def _str(file: dict[str, object], key: str, path: Path) -> str | None:
    if key not in file:
        return None
    value = file[key]
    if not isinstance(value, str):
        raise ConfigError(f"{path}: {key} must be a string")
    return value


def _float(text: str | None, name: str) -> float | None:
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a number of seconds") from None


def _read_token_file(token_path: Path, config: Path) -> str:
    try:
        return token_path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{config}: cannot read token_file {token_path}: {exc.strerror}") from exc


def _masters_target(address: str, source: str) -> str:
    """``10.0.0.1:50051,10.0.0.2:50051`` (an active master and its standby) as the gRPC
    target ``ipv4:10.0.0.1:50051,10.0.0.2:50051``: the channel connects to whichever
    listens, and only the active master does. Host names need one DNS name with both
    addresses (``dns:///hadar-master.lab.example:50051``) instead."""
    if "," not in address or address.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return address
    origin = "" if source in ("argument", "default") else f" (from {source})"
    parts = [part.strip() for part in address.split(",")]
    families: set[str] = set()
    for part in parts:
        _check_address(part, source)
        host = part.rpartition(":")[0].strip("[]")
        try:
            families.add("ipv6" if ipaddress.ip_address(host).version == 6 else "ipv4")
        except ValueError:
            raise ConfigError(
                f"master address {address!r}{origin}: a list of masters takes IP addresses; "
                "for host names use one DNS name that resolves to every master "
                "(dns:///NAME:PORT)"
            ) from None
    if len(families) != 1:
        raise ConfigError(f"master address {address!r}{origin} mixes IPv4 and IPv6 addresses")
    return f"{families.pop()}:{','.join(parts)}"


def _check_address(address: str, source: str) -> None:
    if address.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return  # a gRPC target URI; the channel reports what it cannot use
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        origin = "" if source in ("argument", "default") else f" (from {source})"
        raise ConfigError(f"master address {address!r}{origin} is not HOST:PORT")
