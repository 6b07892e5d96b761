"""The README's examples against what `make serve` serves (the shipped model repository: de-en, zh-en and multi), with
what they print checked (issue 55: the documents example was a 422 with two models, the DeepL glossary example
printed "The dog is sleeping hound.", the LibreTranslate example "New Zealand." for "Neue Zeile."). The curl commands
(one per family of endpoints), the documents commands, and the four client snippets, which live in
docs/protocols.md's "Clients" since the README became a front page (issue 58); test_readme_commands.py and
tests/protocols/test_client_snippets.py run them against the tiny test model too."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from service.models.registry import repository_direction_models

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PROTOCOLS = (ROOT / "docs" / "protocols.md").read_text(encoding="utf-8")


def section(title: str, text: str = README) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def curl_commands() -> list[str]:
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if line.strip().startswith("curl"):
                commands.append(line.strip())
    return commands


@pytest.fixture(scope="module")
def shipped(shipped_models):
    return shipped_models


def run(command: str, server, cwd: Path) -> str:
    pointed = re.sub(r"(https?://)?(localhost|127\.0\.0\.1):8000", server.url, command)
    done = subprocess.run(["bash", "-c", pointed], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert done.returncode == 0, f"{pointed}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture
def needs_curl():
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")


def test_make_serve_serves_what_the_readme_says(shipped):
    served = {m["name"] for m in httpx.get(shipped.url + "/v1/models", timeout=30).json()["models"]}
    line = next(c for c in re.findall(r"```bash\n(.*?)```", README, re.S)[0].splitlines() if c.startswith("make serve"))
    assert served == {"de-en", "zh-en", "multi"} and all(name in line for name in served), line


def the_curl(*parts: str) -> str:
    """The one README curl command that contains every one of ``parts``."""
    [command] = [c for c in curl_commands() if all(p in c for p in parts)]
    return command


def test_the_curl_examples_print_translations(shipped, needs_curl, tmp_path):
    first = curl_commands()[0]
    stream = the_curl('"stream": true')
    auto = the_curl('"source_language": "auto"')
    [t] = json.loads(run(first, shipped, tmp_path))["translations"]
    assert t["model"] == "de-en" and re.search(r"\bman\b", t["text"]) and re.search(r"\b(bicycle|bike)\b", t["text"])
    events = re.findall(r"event: (\w+)\ndata: (.*)\n", run(stream, shipped, tmp_path))
    shown = re.findall(r"event: (\w+)\ndata: (.*)\n", section("Streaming").split("The events", 1)[1])
    final = next(json.loads(d) for e, d in events if e == "translation")["translation"]["text"]
    shown_final = re.search(r'"translation": \{"text": "([^"]*)"', dict(shown)["translation"]).group(1)
    assert final == shown_final == "".join(json.loads(d)["text"] for e, d in events if e == "delta")
    assert json.loads(dict(events)["done"]) == json.loads(dict(shown)["done"])
    answer = json.loads(run(auto, shipped, tmp_path))["translations"]
    # zh->en is answered by whichever model the shipped repository's direction-models names (multi since version 2)
    chosen = repository_direction_models(ROOT / "model_repository")
    assert [(a["model"], a["detected_language"]) for a in answer] == [(chosen["zh-en"], "zh"), ("de-en", "de")]
    assert "book" in answer[0]["text"] and "dog" in answer[1]["text"]


def test_the_attention_embedding_and_protocol_examples(shipped, needs_curl, tmp_path):
    """One README example per family beyond /v1/translate: alignment, attention, embeddings, and the DeepL,
    LibreTranslate and Open Inference Protocol requests, each answering what the README says it answers."""
    [t] = json.loads(run(the_curl('"return_alignment": true'), shipped, tmp_path))["translations"]
    assert "dog" in t["text"].lower() and t["alignment"]
    source, target = t["source_tokens"], t["target_tokens"]
    assert all(0 <= s < len(source) - 1 and 0 <= j < len(target) for s, j in t["alignment"])  # never </s>
    maps = json.loads(run(the_curl("/v1/attention"), shipped, tmp_path))
    layers = maps["cross"]
    assert set(maps) >= {"source_tokens", "target_tokens", "cross"} and "encoder" not in maps  # "kinds": ["cross"]
    assert len(layers) == 3 and all(len(heads) == 1 for heads in layers)  # the decoder's 3 layers; heads averaged
    for [cross] in layers:
        assert len(cross) == len(maps["target_tokens"]) and all(len(r) == len(maps["source_tokens"]) for r in cross)
        assert all(abs(sum(row) - 1) < 1e-3 for row in cross)
    embedded = json.loads(run(the_curl("/v1/embed"), shipped, tmp_path))
    vectors = embedded["embeddings"]
    assert len(vectors) == 2 and all(len(v) == embedded["dimension"] for v in vectors)
    assert all(abs(sum(x * x for x in v) - 1) < 1e-3 for v in vectors)  # normalized unless asked otherwise
    [deepl] = json.loads(run(the_curl("/v2/translate"), shipped, tmp_path))["translations"]
    assert deepl["detected_source_language"] == "DE" and deepl["text"] == "A dog plays in the snow."
    libre = json.loads(run(the_curl("localhost:8000/translate "), shipped, tmp_path))
    assert libre["translatedText"] == "A dog plays in the snow." and libre["detectedLanguage"]["language"] == "de"
    inferred = json.loads(run(the_curl("/infer"), shipped, tmp_path))
    outputs = {o["name"]: o["data"] for o in inferred["outputs"]}
    assert inferred["model_name"] == "de-en" and outputs["TRANSLATION"] == ["A dog plays in the snow."]


def test_the_documents_example_with_two_models(shipped, needs_curl, tmp_path):
    [block] = re.findall(r"```sh\n(.*?)```", section("Documents and glossaries"), re.S)
    lines = [line for line in block.splitlines() if line.strip()]
    (tmp_path / "brief.md").write_text("# Brief\n\nDer Hund schläft im Garten.\n", encoding="utf-8")
    job_id = run(lines[0] + "\necho $ID", shipped, tmp_path).strip()
    for _ in range(300):
        job = httpx.get(f"{shipped.url}/v1/documents/{job_id}", timeout=30).json()
        if job["status"] in ("done", "failed"):
            break
        time.sleep(0.1)
    assert job["status"] == "done" and job["model"] == "de-en" and job["detected_language"] == "de", job
    for line in lines[1:]:
        out = run(line.replace("$ID", job_id), shipped, tmp_path)
    translated = (tmp_path / "brief.en.md").read_text(encoding="utf-8")
    assert translated.startswith("# ") and "dog" in translated and "Hund" not in translated
    assert json.loads(out)["translatedFileUrl"].endswith(".brief.md")


# what each client snippet of the README prints, line by line (a regular expression each)
PRINTED = {
    "tritonclient": [r"\[b'A dog plays in the snow\.' b'Two cats .*'\] \[.*\]", r"\(2, \d+\)"],
    "kserve": [r"\{'TRANSLATION': \['A dog plays in the snow\.'\], 'SCORE': \[.*\], 'WARNINGS': \['\[\]'\]\}"],
    "libretranslatepy": [
        r"A dog plays in the snow\. Two cats .*",
        r"The ball is red\.",
        r"\[\{'confidence': .*'de'\}.*",
    ],
    "deepl": [
        r"A dog plays in the snow\. Two cats .* DE 48",
        r"\['DE', 'EN-GB', 'EN-US', 'ZH', 'ZH-HANS'\] Usage this billing period:",  # multi: into German, Chinese
        r"Characters: \d+ of \d+",
        r"The hound is sleeping\.",
        r"A dog plays in the snow\.",
        r"",
        r"Two cats .*",
    ],
}


@pytest.mark.parametrize("client", list(PRINTED))
def test_the_client_snippets_print_what_they_should(shipped, client, tmp_path):
    snippets = re.findall(r"```python\n(.*?)```", section("Clients", PROTOCOLS), re.S)
    [code] = [s for s in snippets if f"import {client}" in s or f"from {client}" in s]
    script = tmp_path / "snippet.py"
    script.write_text(code.replace("127.0.0.1:8000", shipped.url.removeprefix("http://")), encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.rstrip("\n").splitlines()
    assert len(printed) == len(PRINTED[client]), done.stdout
    for line, pattern in zip(printed, PRINTED[client], strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    if client == "deepl":  # the comment under the glossary example says what it prints
        assert '# prints "The hound is sleeping."' in code
