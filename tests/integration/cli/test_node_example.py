"""The Node.js example submits a job and lists jobs on a real master, using only protos/."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.cli.conftest import Cluster

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "clients" / "examples" / "node"
NODE = shutil.which("node")
NPM = shutil.which("npm")

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None, reason="Node.js (node and npm) is not installed on this machine"
)


def node_modules() -> Path:
    """The example's dependencies, installed once per package-lock.json into a cache
    directory (never into the source tree)."""
    lock = (EXAMPLE / "package-lock.json").read_bytes()
    cache_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    prefix = cache_root / "hadar" / "node-example" / hashlib.sha256(lock).hexdigest()[:16]
    modules = prefix / "node_modules"
    if (modules / "@grpc" / "grpc-js").is_dir() and (modules / "@grpc" / "proto-loader").is_dir():
        return modules
    prefix.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(EXAMPLE / name, prefix / name)
    assert NPM is not None
    done = subprocess.run(
        [NPM, "ci", "--no-audit", "--no-fund", "--prefix", str(prefix)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"npm ci failed (is the npm registry reachable?):\n{done.stderr[-2000:]}")
    return modules


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADAR_")}
    env["NODE_PATH"] = str(node_modules())
    return subprocess.run(
        [NODE, str(EXAMPLE / "hadar-example.js"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_node_example_submits_and_lists(cluster: Cluster):
    """The example's job is accepted for its token's user and shows up in the listing."""
    first = run_example(
        "--master",
        cluster.address,
        "--token",
        cluster.tokens["alice"],
        "--workload",
        "lstm",
        "--iterations",
        "50",
        "--name",
        "from-node",
    )
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    submitted = summary["submitted"]
    assert submitted == {
        "id": submitted["id"],
        "name": "from-node",
        "user": "alice",
        "state": "JOB_STATE_PENDING",
    }
    assert {
        "id": submitted["id"],
        "name": "from-node",
        "user": "alice",
        "state": "JOB_STATE_PENDING",
    } in summary["jobs"]

    as_bob = run_example("--master", cluster.address, "--token", cluster.tokens["bob"])
    assert as_bob.returncode == 0, as_bob.stderr
    ids = [job["id"] for job in json.loads(as_bob.stdout)["jobs"]]
    assert ids == sorted(ids, key=int) and submitted["id"] in ids and len(ids) == 2


def test_node_example_reports_a_refused_token(cluster: Cluster):
    """A bad token exits 1 with the gRPC status on stderr."""
    refused = run_example("--master", cluster.address, "--token", "hdr_wrong")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: UNAUTHENTICATED: ")
