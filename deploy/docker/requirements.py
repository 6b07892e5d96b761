"""Write the serving requirements of the image from pyproject.toml's ``[project] dependencies``.

The CPU image installs them as they are. The GPU image installs them without ``onnxruntime``, beside
requirements-gpu.txt's pinned ``onnxruntime-gpu`` (the two wheels ship the same module and cannot be installed
side by side). Standard library only: it runs in the image's build stage before anything is installed.

    python deploy/docker/requirements.py pyproject.toml                        # CPU list
    python deploy/docker/requirements.py pyproject.toml --without-onnxruntime  # GPU list (+ requirements-gpu.txt)
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

FORBIDDEN = {"torch"}  # the serving image must never pull a training framework


def package_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def serving_requirements(pyproject: Path, without_onnxruntime: bool = False) -> list[str]:
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    names = {package_name(d) for d in deps}
    if names & FORBIDDEN:
        raise SystemExit(f"serving dependencies must not include {sorted(names & FORBIDDEN)}")
    if "onnxruntime" not in names:
        raise SystemExit("pyproject.toml's [project] dependencies do not list onnxruntime")
    return [d for d in deps if not (without_onnxruntime and package_name(d) == "onnxruntime")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", type=Path)
    parser.add_argument(
        "--without-onnxruntime", action="store_true", help="leave onnxruntime out (the GPU image: requirements-gpu.txt)"
    )
    args = parser.parse_args(argv)
    sys.stdout.write("\n".join(serving_requirements(args.pyproject, args.without_onnxruntime)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
