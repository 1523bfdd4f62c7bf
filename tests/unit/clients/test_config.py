"""Where the client finds the master and its token: argument, environment, file, default."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.config import DEFAULT_ADDRESS, ConfigError, config_path, resolve


def write_config(home: Path, text: str) -> Path:
    path = home / ".config" / "hadar" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_defaults_apply_when_nothing_is_configured(tmp_path):
    """No argument, no environment, no file: the local master without a token."""
    config = resolve(env={"HOME": str(tmp_path)})
    assert config.address == DEFAULT_ADDRESS
    assert config.token is None
    assert config.timeout_s == 10.0
    assert (config.address_source, config.token_source) == ("default", "none")


def test_file_then_environment_then_argument_take_precedence(tmp_path):
    """Each layer overrides the one below it, setting by setting."""
    path = write_config(tmp_path, 'master = "file-host:1"\ntoken = "file-token"\ntimeout = 3\n')
    env = {"HOME": str(tmp_path)}
    from_file = resolve(env=env)
    assert (from_file.address, from_file.token, from_file.timeout_s) == (
        "file-host:1",
        "file-token",
        3,
    )
    assert from_file.address_source == str(path)

    env |= {"HADAR_MASTER": "env-host:2", "HADAR_TIMEOUT": "4.5"}
    from_env = resolve(env=env)
    assert (from_env.address, from_env.token, from_env.timeout_s) == (
        "env-host:2",
        "file-token",
        4.5,
    )
    assert from_env.address_source == "HADAR_MASTER"

    from_args = resolve("arg-host:3", "arg-token", 7, env=env | {"HADAR_TOKEN": "env-token"})
    assert (from_args.address, from_args.token, from_args.timeout_s) == (
        "arg-host:3",
        "arg-token",
        7,
    )
    assert from_args.token_source == "argument"


def test_xdg_config_home_and_hadar_config_choose_the_file(tmp_path):
    """XDG_CONFIG_HOME moves the config directory; HADAR_CONFIG names the file itself."""
    xdg = tmp_path / "xdg"
    (xdg / "hadar").mkdir(parents=True)
    (xdg / "hadar" / "config.toml").write_text('master = "xdg-host:9"\n')
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(xdg)}
    assert config_path(env) == xdg / "hadar" / "config.toml"
    assert resolve(env=env).address == "xdg-host:9"
    other = tmp_path / "other.toml"
    other.write_text('master = "other-host:8"\n')
    assert resolve(env=env | {"HADAR_CONFIG": str(other)}).address == "other-host:8"


def test_token_file_is_read_and_stripped(tmp_path):
    """token_file keeps the secret out of the config file itself."""
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    write_config(tmp_path, f'token_file = "{secret}"\n')
    config = resolve(env={"HOME": str(tmp_path)})
    assert config.token == "s3cret"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("master = \n", "not valid TOML"),
        ('mastr = "x:1"\n', "unknown key 'mastr'"),
        ("master = 5\n", "master must be a string"),
        ('timeout = "soon"\n', "timeout must be a number"),
        ('master = "no-port"\n', "is not HOST:PORT"),
        ("timeout = 0\n", "timeout 0 is out of range: more than 0, up to 31622400 seconds"),
        ("timeout = inf\n", "timeout inf is out of range"),
    ],
)
def test_bad_config_files_name_the_problem(tmp_path, text, message):
    """A broken config file is an error that says what is wrong, not a silent default."""
    write_config(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        resolve(env={"HOME": str(tmp_path)})


def test_bad_environment_values_are_rejected(tmp_path):
    """HADAR_TIMEOUT must be a number and HADAR_MASTER an address."""
    env = {"HOME": str(tmp_path)}
    with pytest.raises(ConfigError, match="HADAR_TIMEOUT"):
        resolve(env=env | {"HADAR_TIMEOUT": "ten"})
    with pytest.raises(ConfigError, match="HADAR_TIMEOUT nan is out of range"):
        resolve(env=env | {"HADAR_TIMEOUT": "nan"})
    with pytest.raises(ConfigError, match="from HADAR_MASTER"):
        resolve(env=env | {"HADAR_MASTER": "host:99999"})


def test_grpc_target_uris_pass_through(tmp_path):
    """unix: and dns: targets are handed to gRPC as they are."""
    assert (
        resolve("unix:/run/hadar.sock", env={"HOME": str(tmp_path)}).address
        == "unix:/run/hadar.sock"
    )


def test_client_certificate_needs_its_key_and_tls(tmp_path):
    """cert_file and key_file go together and need ca_file; given, they are resolved."""
    config = tmp_path / "config.toml"
    env = {"HADAR_CONFIG": str(config), "HOME": str(tmp_path)}
    config.write_text('ca_file = "/ca.pem"\ncert_file = "/c.pem"\n')
    with pytest.raises(ConfigError, match="cert_file and key_file go together"):
        resolve(env=env)
    config.write_text('cert_file = "/c.pem"\nkey_file = "/k.pem"\n')
    with pytest.raises(ConfigError, match="cert_file needs ca_file"):
        resolve(env=env)
    config.write_text('ca_file = "/ca.pem"\ncert_file = "/c.pem"\nkey_file = "/k.pem"\n')
    resolved = resolve(env=env)
    assert (resolved.cert_file, resolved.key_file) == (Path("/c.pem"), Path("/k.pem"))


def test_hadar_config_naming_a_missing_file_is_an_error(tmp_path):
    """HADAR_CONFIG is an explicit choice: a path that does not exist is refused by name,
    where a missing default config file just means no settings."""
    missing = tmp_path / "nowhere" / "hctl.toml"
    with pytest.raises(ConfigError, match=rf"HADAR_CONFIG={missing}: no such config file"):
        resolve(env={"HADAR_CONFIG": str(missing)})
    assert resolve(env={"HOME": str(tmp_path)}).address_source == "default"


def test_a_list_of_master_addresses_becomes_one_grpc_target(tmp_path):
    """An active master and its standby, listed with a comma, become one ipv4:/ipv6: target
    (the channel connects to whichever listens); host names and bad parts are refused with
    the reason."""
    env = {"HOME": str(tmp_path)}
    assert (
        resolve("10.0.0.1:50051, 10.0.0.2:50051", env=env).address
        == "ipv4:10.0.0.1:50051,10.0.0.2:50051"
    )
    assert resolve("[::1]:50051,[::2]:50051", env=env).address == "ipv6:[::1]:50051,[::2]:50051"
    with pytest.raises(ConfigError, match="dns:///NAME:PORT"):
        resolve("head-a:50051,head-b:50051", env=env)
    with pytest.raises(ConfigError, match="not HOST:PORT"):
        resolve("10.0.0.1:50051,10.0.0.2", env=env)
    with pytest.raises(ConfigError, match="mixes IPv4 and IPv6"):
        resolve("10.0.0.1:50051,[::1]:50051", env=env)
