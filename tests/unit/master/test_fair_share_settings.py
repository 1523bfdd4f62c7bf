"""The fair-share and quota settings: the [fair_share] table, flat keys and the
environment, how they become the rounds' configuration, and bad values refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.settings import Settings, SettingsError, load


def test_fair_share_table_in_the_config_file(tmp_path: Path) -> None:
    """A [fair_share] table beside [master] sets users, groups, group shares, half-life
    and quotas; the rounds get them as one configuration."""
    path = tmp_path / "master.toml"
    path.write_text(
        """
[master]
policy = "las"

[fair_share]
enabled = true
users = {alice = 2, bob = 1}
groups = {vision-lab = ["alice", "carol"]}
group_shares = {vision-lab = 3}
default_share = 0.5
half_life = "1d"
max_gpus_per_user = 8
quotas = {carol = 2}
"""
    )
    config = load(path, environ={}).fair_share_config()
    assert config is not None
    assert config.enabled
    assert dict(config.user_shares) == {"alice": 2.0, "bob": 1.0}
    assert dict(config.groups) == {"vision-lab": ("alice", "carol")}
    assert dict(config.group_shares) == {"vision-lab": 3.0}
    assert config.default_share == 0.5
    assert config.half_life_s == 86400.0
    assert (config.quota("alice"), config.quota("carol")) == (8, 2)


def test_flat_file_and_environment(tmp_path: Path) -> None:
    """A flat file takes [fair_share] too; the environment sets the same keys, groups as
    members separated by '|', and wins over the file."""
    path = tmp_path / "flat.toml"
    path.write_text('policy = "fifo"\n[fair_share]\nusers = {alice = 4}\n')
    assert load(path, environ={}).fair_share_users == {"alice": 4.0}
    environ = {
        "HADAR_FAIR_SHARE": "on",
        "HADAR_FAIR_SHARE_USERS": "alice=3,bob=1",
        "HADAR_FAIR_SHARE_GROUPS": "lab=alice|carol",
        "HADAR_MAX_GPUS_PER_USER": "4",
    }
    config = load(path, environ=environ).fair_share_config()
    assert config is not None and config.enabled
    assert dict(config.user_shares) == {"alice": 3.0, "bob": 1.0}
    assert dict(config.groups) == {"lab": ("alice", "carol")}
    assert config.quota("bob") == 4


def test_off_by_default_and_quota_alone() -> None:
    """Neither fair share nor a quota by default: rounds get no configuration; a quota
    alone gives one with fair share off."""
    assert Settings().fair_share_config() is None
    quota_only = Settings(max_gpus_per_user=2).fair_share_config()
    assert quota_only is not None and not quota_only.enabled and quota_only.quota("x") == 2


def test_bad_values_are_refused_by_name(tmp_path: Path) -> None:
    """A non-positive share, a user in two groups, a fractional quota, a bad half-life or
    an unknown [fair_share] key are refused saying what is wrong."""
    with pytest.raises(SettingsError, match="share of user 'bob' must be > 0"):
        Settings(fair_share=True, fair_share_users={"bob": 0})
    with pytest.raises(SettingsError, match="two groups"):
        Settings(fair_share=True, fair_share_groups={"a": ["x"], "b": ["x"]})
    with pytest.raises(SettingsError, match="members of 'a' must be a list"):
        Settings(fair_share=True, fair_share_groups={"a": 3})
    with pytest.raises(SettingsError, match="whole number"):
        Settings(gpu_quotas={"bob": 1.5})
    with pytest.raises(SettingsError, match="not a duration"):
        Settings(fair_share=True, fair_share_half_life="soon")
    path = tmp_path / "bad.toml"
    path.write_text("[fair_share]\nshare = {a = 1}\n")
    with pytest.raises(SettingsError, match="unknown key 'share' in \\[fair_share\\]"):
        load(path, environ={})
