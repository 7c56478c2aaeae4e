"""Compile `protos/` into `aggregation/proto/` with grpcio-tools' protoc.

flyteidl's pip package ships generated Python but no .proto sources, so the imports of
`flyteidl/core/*.proto` are resolved from the descriptors flyteidl itself registers: we serialize them
into a FileDescriptorSet and hand it to protoc (`--descriptor_set_in`). The generated module imports
flyteidl's own classes; nothing of flyteidl is copied.

Usage: python protos/generate.py [--out DIR]   (default: aggregation/proto)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "protos"
SOURCES = ["aggsim/v1/scenario.proto"]


def flyteidl_descriptor_set() -> bytes:
    from flyteidl.core import errors_pb2, execution_pb2
    from google.protobuf import descriptor_pb2

    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def add(file_descriptor) -> None:
        if file_descriptor.name in files:
            return
        for dependency in file_descriptor.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file_descriptor.CopyToProto(proto)
        files[file_descriptor.name] = proto

    add(errors_pb2.DESCRIPTOR)
    add(execution_pb2.DESCRIPTOR)
    return descriptor_pb2.FileDescriptorSet(file=list(files.values())).SerializeToString()


def generate(out_dir: Path) -> list[Path]:
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        descriptor_set = Path(tmp) / "flyteidl.pb"
        descriptor_set.write_bytes(flyteidl_descriptor_set())
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"--descriptor_set_in={descriptor_set}",
            f"--python_out={out_dir}",
            *SOURCES,
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed: {' '.join(args)}")
    written = []
    for source in SOURCES:
        package_dir = out_dir
        for part in Path(source).parent.parts:
            package_dir = package_dir / part
            init = package_dir / "__init__.py"
            if not init.exists():
                init.write_text("")
        written.append(out_dir / source.replace(".proto", "_pb2.py"))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "aggregation" / "proto")
    args = parser.parse_args()
    for path in generate(args.out):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


if __name__ == "__main__":
    sys.exit(main())
