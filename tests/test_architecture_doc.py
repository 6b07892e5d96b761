"""docs/architecture.md: every file its concept table links exists and defines the functions it names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| [^|]+ \| \[`([^`]+)`\]\(\.\./([^)]+)\) (.+) \|$")


def defined_names(path: Path) -> set[str]:
    """Top-level functions and classes, and Class.method for methods."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
    return names


def concept_rows() -> list[tuple[str, list[str]]]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            shown, target, names = match.groups()
            assert shown == target, line
            rows.append((target, re.findall(r"`([\w.]+)`", names)))
    return rows


def test_every_concept_row_names_a_real_function():
    rows = concept_rows()
    assert len(rows) >= 20
    for target, names in rows:
        path = ROOT / target
        assert path.is_file(), target
        assert names, target
        missing = set(names) - defined_names(path)
        assert not missing, f"{target} does not define {sorted(missing)}"


def test_the_table_covers_the_concepts_the_description_names():
    text = DOC.read_text(encoding="utf-8").lower()
    for concept in (
        "scaled dot-product",
        "multi-head",
        "sinusoidal",
        "post-ln and pre-ln",
        "ffn",
        "masked decoder",
        "cross-attention",
        "label smoothing",
        "noam",
        "greedy and beam",
        "kv cache",
        "int8",
        "dynamic batching",
    ):
        assert concept in text, concept
