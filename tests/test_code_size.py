"""Size limits of the service and engine packages (issue 58): no module over 500 lines, no function over 80 lines
(read with ast: a function's lines from its ``def`` to its last line, docstring and nested functions included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "service")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_over_500_lines(package):
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules()
        if p.relative_to(ROOT).parts[0] == package and (n := len(p.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert long == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_over_80_lines(package):
    long = {}
    for path in modules():
        if path.relative_to(ROOT).parts[0] != package:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = node.end_lineno - start + 1
    assert long == {}
