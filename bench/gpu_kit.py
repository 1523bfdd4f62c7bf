"""The GPU kit: Hadar's GPU check on a machine with no package registry (an air-gapped lab's
GPU server, or a lent GPU machine that has PyTorch but nothing of Hadar's).

On a machine with the registry and the development install (``make setup``)::

    make gpu-kit                       # = .venv/bin/python bench/gpu_kit.py download

downloads into ``gpu-kit/wheels`` (ignored by git) the wheels, for CPython 3.12 on
manylinux x86_64, of what Hadar's master, worker and hctl need beyond what a CUDA PyTorch
image already has, at the versions this checkout was tested with, and Hadar's build backend.
torch is never in it: the GPU machine's own CUDA build is the one to check. Copy the
checkout with ``gpu-kit/`` to the GPU machine; there, with no network::

    python3 bench/gpu_kit.py check [gpu_check options]

makes ``gpu-kit/venv``, a virtualenv that sees the machine's packages
(``--system-site-packages``: its torch, numpy, scipy, nvidia-ml-py), installs the kit into it
with ``pip install --no-index --find-links gpu-kit/wheels``, installs this checkout (editable,
so a fix is in the next run) and runs ``bench/gpu_check.py`` with it. Anything the machine
lacks that the kit does not hold is named by pip before anything runs.

This file uses the standard library alone: ``check`` runs on the GPU machine's bare python3.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "gpu-kit"
WHEELS = KIT / "wheels"
ENV = KIT / "venv"
PYTHON_VERSION = "3.12"
# pip matches a manylinux tag exactly: every glibc level a wheel of these packages is built for.
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "any",
)
# What Hadar needs that a CUDA PyTorch image (torch, numpy, scipy, scikit-learn, matplotlib,
# nvidia-ml-py, rich, prometheus-client) usually lacks, or has at a version older than
# Hadar's pins (grpcio and protobuf: the generated code names the versions it needs).
KIT_ROOTS = (
    "grpcio",
    "protobuf",
    "structlog",
    "grpcio-health-checking",
    "grpcio-reflection",
    "sqlalchemy",
    "alembic",
    "apscheduler",
    "psycopg",
    "psycopg-binary",
    "ecos",
    "highspy",
    # Hadar's own build backend: the checkout is installed on the GPU machine from source.
    "setuptools",
)
# Requirements of the roots that such an image provides: left out of the kit, as torch is.
PROVIDED = frozenset(
    {
        "numpy",
        "scipy",
        "torch",
        "typing-extensions",
        "markupsafe",
        "six",
        "packaging",
    }
)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_closure(roots: Iterable[str], provided: frozenset[str]) -> dict[str, str]:
    """Each root and, transitively, each requirement it has on Linux with CPython 3.12 that is
    not ``provided``, at the version installed here (what the tests ran with)."""
    from importlib import metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    target: dict[str, str] = {
        **{k: str(v) for k, v in default_environment().items()},
        "python_version": PYTHON_VERSION,
        "python_full_version": f"{PYTHON_VERSION}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
    pins: dict[str, str] = {}
    pending = [_canonical(r) for r in roots]
    while pending:
        name = pending.pop()
        if name in pins or name in provided:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(
                f"gpu-kit: {name} is not installed here; run `make setup` first, then "
                "`make gpu-kit`"
            ) from None
        pins[name] = dist.version
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate(target):
                continue
            pending.append(_canonical(requirement.name))
    return dict(sorted(pins.items()))


def download(pins: dict[str, str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--dest",
        str(dest),
    ]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    argv += [f"{name}=={version}" for name, version in pins.items()]
    subprocess.run(argv, check=True)
    for name, version in pins.items():
        print(f"gpu-kit: {name}=={version}")
    size = sum(p.stat().st_size for p in dest.glob("*.whl"))
    print(f"gpu-kit: {len(pins)} packages, {size / 1024**2:.1f} MiB in {dest.relative_to(ROOT)}")


def _run(argv: Sequence[str]) -> None:
    print("gpu-kit: " + " ".join(str(a) for a in argv), flush=True)
    subprocess.run(list(argv), check=True)


def see_machine_packages(env: Path) -> None:
    """Make the packages of the python running this visible in ``env``.

    ``--system-site-packages`` shows the base interpreter's packages only; where this runs
    from a virtualenv (a PyTorch image's python often is one), its torch is in that
    virtualenv, so a .pth file adds its folders after the kit's own."""
    if sys.prefix == sys.base_prefix:
        return
    folders = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site,) = env.glob("lib/python*/site-packages")
    (site / "_machine_packages.pth").write_text("".join(f"{f}\n" for f in folders))


def install() -> Path | None:
    """Install the kit into a virtualenv over this machine's packages, then this checkout;
    returns the virtualenv's python (None: no kit here)."""
    if not any(WHEELS.glob("*.whl")):
        print(
            f"gpu-kit: no wheels in {WHEELS}; run `make gpu-kit` on a machine with the "
            "package registry and copy gpu-kit/ here",
            file=sys.stderr,
        )
        return None
    python = ENV / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(system_site_packages=True, with_pip=True).create(ENV)
    see_machine_packages(ENV)
    offline = ["--no-index", "--find-links", str(WHEELS), "--no-cache-dir", "--quiet"]
    kit = sorted({_canonical(w.name.split("-")[0]) for w in WHEELS.glob("*.whl")} - {"setuptools"})
    _run([str(python), "-m", "pip", "install", *offline, *kit])
    # Editable, from this checkout; the build backend comes from the kit too.
    _run([str(python), "-m", "pip", "install", *offline, "-e", f"{ROOT}[master,worker,cli]"])
    return python


def check(args: Sequence[str]) -> int:
    """Install the kit and run the GPU check with it."""
    python = install()
    if python is None:
        return 2
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [str(python), str(ROOT / "bench" / "gpu_check.py"), *args], check=False, env=env
    ).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_kit.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("download", help="fetch the kit's wheels into gpu-kit/wheels")
    sub.add_parser("install", help="install the kit offline into gpu-kit/venv, and no more")
    run = sub.add_parser("check", help="install the kit offline and run bench/gpu_check.py")
    run.add_argument("rest", nargs=argparse.REMAINDER, help="options for gpu_check.py")
    ns = parser.parse_args(argv)
    if ns.command == "download":
        download(pinned_closure(KIT_ROOTS, PROVIDED), WHEELS)
        return 0
    if ns.command == "install":
        return 0 if install() is not None else 2
    rest = [a for a in ns.rest if a != "--"]
    return check(rest)


if __name__ == "__main__":
    sys.exit(main())
