"""docs/protocols.md's "Clients" snippets (tritonclient, kserve, libretranslatepy, deepl), once the README's, run
against the live server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocols.md"


def snippets() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Clients\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


CLIENTS = ["tritonclient", "kserve", "libretranslatepy", "deepl"]


def test_the_doc_has_the_four_clients():
    found = snippets()
    assert len(found) == len(CLIENTS)
    for client, code in zip(CLIENTS, found, strict=True):
        assert f"import {client}" in code or f"from {client}" in code


@pytest.mark.parametrize("index", range(len(CLIENTS)), ids=CLIENTS)
def test_snippet_runs(live_server, index, tmp_path):
    code = snippets()[index].replace("127.0.0.1:8000", live_server.url.removeprefix("http://"))
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the snippet printed nothing"
    if CLIENTS[index] == "deepl":  # the document example wrote its translation beside the source
        translated = (tmp_path / "note.en.txt").read_text(encoding="utf-8")
        source = (tmp_path / "note.txt").read_text(encoding="utf-8")
        assert translated != source
        assert len([p for p in translated.split("\n\n") if p.strip()]) == 2, translated
