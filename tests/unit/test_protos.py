"""The committed stubs are exactly what the committed .proto files generate."""

from __future__ import annotations

from pathlib import Path

from protos import generate


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    """Changing a .proto without `make protos` fails here, naming the stale file."""
    generate.generate(tmp_path)
    fresh_dir = tmp_path / "protos" / "hadar" / "v1"
    fresh = {p.name: p.read_bytes() for p in fresh_dir.iterdir() if p.is_file()}
    committed = {
        p.name: p.read_bytes()
        for p in generate.PROTO_DIR.iterdir()
        if p.name.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))
    }
    assert sorted(fresh) == sorted(committed), "stub files differ: run `make protos`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated stubs {stale}: run `make protos` and commit"


def test_job_states_follow_the_documented_life() -> None:
    """Enums start at *_UNSPECIFIED = 0 and list every job state of the design."""
    from protos.hadar.v1 import common_pb2

    names = [v.name for v in common_pb2.JobState.DESCRIPTOR.values]
    assert names == [
        "JOB_STATE_UNSPECIFIED",
        "JOB_STATE_PENDING",
        "JOB_STATE_RUNNING",
        "JOB_STATE_PREEMPTED",
        "JOB_STATE_COMPLETED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_TIMEOUT",
    ]
    for enum in common_pb2.DESCRIPTOR.enum_types_by_name.values():
        assert enum.values[0].number == 0
        assert enum.values[0].name.endswith("_UNSPECIFIED")
