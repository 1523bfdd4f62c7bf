"""Worker settings: defaults < TOML < environment < flags, with precise errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.settings import SettingsError, load_settings, parse_host_port

# A master and the cluster token: what every worker that runs needs.
MASTER = {"master": "m:1", "token": "t"}


def test_sources_override_in_order(tmp_path: Path) -> None:
    """Flags beat the environment, which beats the TOML file, which beats the defaults."""
    config = tmp_path / "worker.toml"
    config.write_text(
        'master = "toml-master:7000"\n'
        'node = "toml-node"\n'
        "grace_s = 12\n"
        'state_dir = "/srv/hadar"\n'
        "[gpu_names]\n"
        '"RTX A4500" = "a4500"\n'
        "[fake_gpu_speeds]\n"
        "k80 = 0.3\n"
    )
    env = {
        "HADAR_WORKER_NODE": "env-node",
        "HADAR_WORKER_GRACE_S": "20",
        "HADAR_WORKER_TOKEN": "t",
        "PATH": "/bin",
    }
    settings = load_settings({"grace_s": 45.0, "master": None}, environ=env, config_path=config)
    assert settings.master == "toml-master:7000"
    assert settings.node == "env-node"
    assert settings.grace_s == 45.0
    assert settings.state_dir == Path("/srv/hadar")
    assert settings.resolved_checkpoint_dir() == Path("/srv/hadar/checkpoints")
    assert settings.resolved_jobs_dir() == Path("/srv/hadar/jobs")
    assert settings.gpu_names == {"RTX A4500": "a4500"}
    assert settings.fake_gpu_speeds == {"k80": 0.3}
    assert settings.listen == "0.0.0.0:7070"


def test_config_path_may_come_from_the_environment(tmp_path: Path) -> None:
    """HADAR_WORKER_CONFIG names the TOML file when --config is absent."""
    config = tmp_path / "w.toml"
    config.write_text('master = "m:1"\n')
    settings = load_settings(
        {}, environ={"HADAR_WORKER_CONFIG": str(config), "HADAR_WORKER_TOKEN": "t"}
    )
    assert settings.master == "m:1"


def test_token_is_read_from_its_file(tmp_path: Path) -> None:
    """token_file is read (stripped) so the token stays out of the command line."""
    token = tmp_path / "token"
    token.write_text("abc123\n")
    settings = load_settings({"master": "m:1", "token_file": token}, environ={})
    assert settings.token == "abc123"
    token.write_text("\n")
    with pytest.raises(SettingsError, match="is empty"):
        load_settings({"master": "m:1", "token_file": token}, environ={})


def test_running_needs_the_cluster_token(tmp_path: Path) -> None:
    """A worker that talks to a master refuses to start without the cluster token, naming
    the setting and where it may come from; only commands without a master (`gpus`, a dry
    `profile`) do without one."""
    for environ in ({}, {"HADAR_WORKER_TOKEN": ""}):
        with pytest.raises(SettingsError, match="token: required") as refused:
            load_settings({"master": "m:1"}, environ=environ)
        for name in ("HADAR_WORKER_TOKEN_FILE", "--token-file", "HADAR_WORKER_TOKEN"):
            assert name in str(refused.value)
    assert load_settings({}, environ={}, require_master=False).token == ""
    token = tmp_path / "token"
    token.write_text("from-file\n")
    env = {"HADAR_WORKER_TOKEN_FILE": str(token)}
    assert load_settings({"master": "m:1"}, environ=env).token == "from-file"
    assert load_settings({"master": "m:1", "token": "t"}, environ={}).token == "t"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({}, "master: required"),
        ({"master": "nohost"}, "master: expected HOST:PORT"),
        ({"master": "h:0"}, "master: bad port 0"),
        ({"master": "h:1", "listen": "h:99999"}, "listen: bad port"),
        ({"master": "h:1", "grace_s": 0}, "grace_s: must be positive"),
        ({"master": "h:1", "grace_s": "soon"}, "grace_s must be a number"),
    ],
)
def test_bad_settings_name_the_setting(flags: dict[str, object], message: str) -> None:
    """Every bad value is refused with the setting's name."""
    with pytest.raises(SettingsError, match=message):
        load_settings(flags, environ={})


def test_bad_toml_is_refused_with_the_file(tmp_path: Path) -> None:
    """Unknown keys, bad tables and invalid TOML name the file."""
    config = tmp_path / "w.toml"
    config.write_text('mastr = "m:1"\n')
    with pytest.raises(SettingsError, match="unknown setting 'mastr'"):
        load_settings({}, environ={}, config_path=config)
    config.write_text('master = "m:1"\n[gpu_names]\n"(" = "x"\n')
    with pytest.raises(SettingsError, match="bad pattern"):
        load_settings({}, environ={}, config_path=config)
    config.write_text("master = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings({}, environ={}, config_path=config)


def test_host_port_parsing() -> None:
    """IPv4, names and bracketed IPv6 parse; port 0 is allowed where asked."""
    assert parse_host_port("127.0.0.1:0", "listen") == ("127.0.0.1", 0)
    assert parse_host_port("[::1]:7070", "listen") == ("::1", 7070)
    assert parse_host_port("gpu-01.lab:7070", "x") == ("gpu-01.lab", 7070)


def test_shipped_example_configs_load() -> None:
    """The example TOML and environment files under systemd/ name only real settings, and the
    worker's examples point at the port the master's example listens on."""
    root = Path(__file__).resolve().parents[3] / "systemd"
    example = root / "hadar-worker.toml.example"
    # A token given directly wins over token_file (which names a path on a real server).
    settings = load_settings({"token": "t"}, environ={}, config_path=example)
    master_env = (root / "hadar-master.env.example").read_text()
    (listen,) = [line for line in master_env.splitlines() if line.startswith("HADAR_LISTEN=")]
    master_port = listen.rsplit(":", 1)[1]
    assert settings.master == f"hadar-head.lab.example:{master_port}"
    assert settings.gpu_names["RTX A4500"] == "a4500"
    env: dict[str, str] = {}
    for raw in (root / "hadar-worker.env.example").read_text().splitlines():
        line = raw.lstrip("#")
        if line.startswith("HADAR_WORKER_") and "=" in line:
            key, value = line.split("=", 1)
            env[key] = value
    env.pop("HADAR_WORKER_CONFIG")
    env.pop("HADAR_WORKER_TOKEN_FILE")
    settings = load_settings({"token": "t"}, environ=env)
    assert settings.master == f"hadar-head.lab.example:{master_port}"
    assert settings.fake_gpus == "v100:2,k80:4"
    assert settings.grace_s == 30


def test_master_tls_flags(tmp_path: Path) -> None:
    """master_tls parses as a boolean; a CA file must exist and implies TLS."""
    env = {"HADAR_WORKER_MASTER_TLS": "yes"}
    settings = load_settings(MASTER, environ=env)
    assert settings.master_tls
    assert settings.master_credentials() is not None
    assert load_settings(MASTER, environ={}).master_credentials() is None
    with pytest.raises(SettingsError, match="master_tls must be true or false"):
        load_settings(MASTER, environ={"HADAR_WORKER_MASTER_TLS": "maybe"})
    with pytest.raises(SettingsError, match="master_ca_file"):
        load_settings({**MASTER, "master_ca_file": tmp_path / "nope.pem"}, environ={})


def test_allow_root_jobs_is_off_unless_set() -> None:
    """Jobs submitted as root are refused by default; the setting is a boolean."""
    assert not load_settings(MASTER, environ={}).allow_root_jobs
    env = {"HADAR_WORKER_ALLOW_ROOT_JOBS": "true"}
    assert load_settings(MASTER, environ=env).allow_root_jobs
    with pytest.raises(SettingsError, match="allow_root_jobs must be true or false"):
        load_settings(MASTER, environ={"HADAR_WORKER_ALLOW_ROOT_JOBS": "root"})


def test_the_interpreter_check_is_on_unless_turned_off() -> None:
    """A root agent checks that other users can run its interpreter unless check_python is
    false (a local cluster whose jobs all run as root)."""
    assert load_settings(MASTER, environ={}).check_python
    env = {"HADAR_WORKER_CHECK_PYTHON": "false"}
    assert not load_settings(MASTER, environ=env).check_python
    with pytest.raises(SettingsError, match="check_python must be true or false"):
        load_settings(MASTER, environ={"HADAR_WORKER_CHECK_PYTHON": "maybe"})
