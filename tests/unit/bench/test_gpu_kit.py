"""The GPU kit: what it downloads for a CUDA PyTorch image, and the virtualenv it installs
into seeing that image's packages."""

from __future__ import annotations

import sys
import venv
from pathlib import Path

import pytest

from bench.gpu_kit import KIT_ROOTS, PROVIDED, pinned_closure, see_machine_packages


def test_the_kit_pins_what_this_checkout_was_tested_with_and_leaves_out_the_images() -> None:
    """Each package is pinned to the version installed here, requirements are followed, and
    what a PyTorch image provides (torch, numpy, typing-extensions) is never in the kit."""
    from importlib import metadata

    pins = pinned_closure(KIT_ROOTS, PROVIDED)
    assert pins["sqlalchemy"] == metadata.version("sqlalchemy")
    assert pins["grpcio"] == metadata.version("grpcio")
    # alembic's own requirement, followed
    assert "mako" in pins
    assert not {"torch", "numpy", "scipy", "typing-extensions"} & set(pins)


def test_a_requirement_for_another_platform_is_not_followed() -> None:
    """Markers are evaluated for Linux and CPython 3.12: psycopg's Windows-only tzdata is
    not in the kit."""
    assert "tzdata" not in pinned_closure(("psycopg",), PROVIDED)


def test_an_uninstalled_root_is_refused_with_the_command_to_run() -> None:
    with pytest.raises(SystemExit, match="make setup"):
        pinned_closure(("no-such-package-anywhere",), PROVIDED)


def test_the_kits_virtualenv_sees_the_packages_of_the_virtualenv_it_was_made_from(
    tmp_path: Path,
) -> None:
    """Made from a virtualenv (as a PyTorch image's python often is), the kit's virtualenv
    lists that virtualenv's folders after its own, so its torch is found."""
    assert sys.prefix != sys.base_prefix, "the suite runs from the project's .venv"
    env = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env)
    see_machine_packages(env)
    (pth,) = env.glob("lib/python*/site-packages/_machine_packages.pth")
    import sysconfig

    assert sysconfig.get_paths()["purelib"] in pth.read_text().splitlines()
