"""README.md's "Documents and glossaries" commands (curl uploads) run, in order, against the documents test server."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def commands() -> list[str]:
    section = README.read_text(encoding="utf-8").split("\n## Documents and glossaries\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line for line in block.splitlines() if line.strip()]


def test_readme_upload_status_download_and_translate_file(doc_server, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    lines = [re.sub(r"localhost:8000", doc_server.url, c) for c in commands()]
    assert lines[0].startswith("ID=$(curl") and any("/translate_file" in c for c in lines)
    (tmp_path / "brief.md").write_text("# der hund\n\nder **hund** spielt im park\n", encoding="utf-8")
    # wait for the job between the upload and the download, as a reader would
    wait = (
        'for i in $(seq 100); do curl -s "{u}/v1/documents/$ID" | grep -q \'"status":"done"\' && break; sleep 0.2; done'
    )
    script = "set -e\n" + lines[0] + "\n" + wait.format(u=doc_server.url) + "\n" + "\n".join(lines[1:]) + "\n"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    translated = (tmp_path / "brief.en.md").read_text(encoding="utf-8")
    assert translated.startswith("# ") and "**" in translated and "hund" not in translated
    answer = json.loads(done.stdout[done.stdout.rindex('{"translatedFileUrl"') :])
    assert answer["translatedFileUrl"].endswith(".brief.md")
