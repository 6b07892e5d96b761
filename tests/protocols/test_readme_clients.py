"""The README's "Clients" snippets (tritonclient, kserve, libretranslatepy) run against the live server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def snippets() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Clients\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def test_readme_has_the_three_clients():
    found = " ".join(snippets())
    assert len(snippets()) == 3
    assert "tritonclient" in found and "kserve" in found and "libretranslatepy" in found


@pytest.mark.parametrize("index", range(3), ids=["tritonclient", "kserve", "libretranslatepy"])
def test_readme_snippet_runs(live_server, index, tmp_path):
    code = snippets()[index].replace("127.0.0.1:8000", live_server.url.removeprefix("http://"))
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the snippet printed nothing"
