"""The bench scripts the docs cite are there: every `python -m bench.<name>` and `bench/<name>.py` in README.md and
docs/*.md names a file of bench/, unless its paragraph names the commit to run it at (a script removed or renamed
since: bench/experiments/, removed in issue 58, runs at `b2d68ca`; bench/serving.py was bench/service.py at
`da642a0`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"python3? -m\s+bench\.([\w.]+)|(?<![\w/.-])bench/([\w/]+)\.(py|c)\b")
COMMIT = re.compile(r"`[0-9a-f]{7,40}\b|git show [0-9a-f]{7,40}:")  # `b2d68ca`, or git show b2d68ca:bench/...


def cited(text: str) -> list[tuple[str, str]]:
    """(paragraph, bench path) of every bench script a text names; a path relative to the repository."""
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        joined = re.sub(r"\s*\n\s*", " ", paragraph)
        for module, path, suffix in REFERENCE.findall(joined):
            out.append((joined, f"bench/{module.replace('.', '/')}.py" if module else f"bench/{path}.{suffix}"))
    return out


def test_cited_finds_both_spellings_and_sees_a_commit():
    text = "Run `python -m bench.serving` or\nbench/raw_client.py.\n\nAt `b2d68ca`: `python -m bench.experiments.x`."
    assert [path for _, path in cited(text)] == ["bench/serving.py", "bench/raw_client.py", "bench/experiments/x.py"]
    assert COMMIT.search(cited(text)[2][0]) and not COMMIT.search(cited(text)[0][0])


def test_every_bench_script_the_docs_cite_exists_or_names_its_commit():
    missing = [
        f"{doc.relative_to(ROOT)}: {path}"
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for paragraph, path in cited(doc.read_text(encoding="utf-8"))
        if not (ROOT / path).is_file() and not COMMIT.search(paragraph)
    ]
    assert missing == []
