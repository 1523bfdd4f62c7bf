"""Regenerate the Python stubs of `protos/hadar/v1/*.proto`.

Run as ``python -m protos.generate [OUT_DIR]``. Without OUT_DIR the stubs are written next to
the .proto files (what `make protos` does); with it, into OUT_DIR/protos/hadar/v1 so a test
can compare a fresh generation with the committed files.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = REPO_ROOT / "protos" / "hadar" / "v1"


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def generate(out_dir: Path) -> None:
    """Compile every .proto into ``out_dir`` (a tree rooted like the repository)."""
    well_known = str(resources.files("grpc_tools") / "_proto")
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = [str(p.relative_to(REPO_ROOT)) for p in proto_files()]
    args = [
        "grpc_tools.protoc",
        f"-I{REPO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *sources,
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT
    generate(out)
    print(f"generated stubs for {len(proto_files())} files under {out}")


if __name__ == "__main__":
    main()
