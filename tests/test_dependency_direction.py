"""The packages' dependency direction, read from the source with ast (nothing is imported):

core/ imports no package of this repository; model/ and export/ never import the service; service/ never imports
torch, model/ or export/; nothing outside service/api imports the HTTP layer; no tuple batch keys remain."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("core", "model", "export", "service", "bench")


def imports(package: str) -> dict[Path, set[str]]:
    found: dict[Path, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[path] = names
    return found


def offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path, names in imports(package).items()
        for name in sorted(names)
        if name.split(".")[0] in forbidden or any(name.startswith(f + ".") or name == f for f in forbidden)
    ]


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("core", ("model", "export", "service", "bench", "torch", "onnx", "fastapi")),
        ("model", ("service", "export", "bench")),
        ("export", ("service.api", "service.serving", "service.scheduling", "bench")),
        ("service", ("torch", "model", "export", "bench", "onnx")),
    ],
)
def test_dependency_direction(package, forbidden):
    assert offenders(package, forbidden) == []


def test_only_the_http_layer_imports_the_http_layer():
    for package in OURS:
        for path, names in imports(package).items():
            if "service/api" in path.as_posix() or path.name == "app.py" and path.parent.name == "service":
                continue
            assert not any(n == "service.api" or n.startswith("service.api.") for n in names), path


def test_no_tuple_batch_keys():
    """Work is submitted with frozen options objects: no submit call passes a kind string and a tuple."""
    for package in ("service",):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "submit" and node.args:
                    first = node.args[0]
                    assert not isinstance(first, ast.Tuple | ast.Constant), f"{path}:{node.lineno}"
