"""Issue 56, end to end: through the real server, with the shipped general-domain bundle as served (int8, its lexical
shortlist, its 4-gram block) on the fused step (MT_FUSED_STEP=true: AVX-512 VNNI, AVX-VNNI or AVX2 kernels, whichever
the CPU has), 64 concurrent clients sending mixed requests (greedy and beam, plain and streamed) get, for every text,
the tokens and score the same request gets alone, under the dynamic and the continuous scheduler, and with the AVX2
kernel forced (MT_FUSED_STEP_KERNEL=avx2: the CPUs without AVX-512)."""

from __future__ import annotations

import random
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from reliability_helpers import metric, start_server
from sse_events import finals, stream_translate

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 64
# everyday German of the kinds people send, written for this test (no corpus)
SENTENCES = [
    "Ein Hund läuft über die Wiese.",
    "Zwei Kinder spielen im Garten mit einem roten Ball.",
    "Die Frau liest ein Buch im Park.",
    "Der Zug nach Berlin hat zwanzig Minuten Verspätung.",
    "Können Sie mir bitte den Weg zum Bahnhof zeigen?",
    "Wir treffen uns morgen um acht Uhr vor dem Kino.",
    "Das Wetter ist heute kalt und regnerisch.",
    "Ein Mann in einem blauen Hemd fährt Fahrrad.",
    "Die Suppe schmeckt sehr gut, aber sie ist zu heiß.",
    "Mein Bruder arbeitet seit drei Jahren in einem Krankenhaus.",
    "Eine Gruppe von Menschen wartet an der Bushaltestelle.",
    "Ich habe meinen Schlüssel im Büro vergessen.",
    "Der Hund schläft neben dem Ofen.",
    "Sie kauft frisches Brot und Käse auf dem Markt.",
    "Die Kinder lachen, weil der Clown hinfällt.",
    "Bitte schließen Sie die Tür, wenn Sie gehen.",
]
KINDS = [{"beam_size": 1}, {"beam_size": 4}, {"beam_size": 2}]


@pytest.fixture(scope="module")
def shipped_de_en(tmp_path_factory) -> Path:
    """A repository of the shipped de-en model only (a link: nothing is copied)."""
    repository = tmp_path_factory.mktemp("shipped-de-en")
    (repository / "de-en").symlink_to(ROOT / "model_repository" / "de-en", target_is_directory=True)
    return repository


@pytest.fixture(scope="module")
def fused_library(tmp_path_factory) -> Path:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler (scripts/install-test-tools.sh installs gcc)")
    out = tmp_path_factory.mktemp("native") / "libmtserve_fused_step.so"
    subprocess.run(["bash", str(ROOT / "native" / "build.sh"), str(out)], check=True, capture_output=True)
    return out


def _has_avx2() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx2" in flags and "fma" in flags


# (scheduler, MT_FUSED_STEP_KERNEL): the CPU's own kernel under both schedulers, and the AVX2 kernel (the family of
# CPUs without AVX-512, forced here where the CPU has more)
@pytest.fixture(scope="module", params=[("dynamic", ""), ("continuous", ""), ("dynamic", "avx2")], ids=str)
def server(request, shipped_de_en, fused_library, tmp_path_factory):
    scheduler, kernel = request.param
    if kernel == "avx2" and not _has_avx2():
        pytest.skip("the CPU has no AVX2 and FMA")
    log_path = tmp_path_factory.mktemp(f"same-answer-{scheduler}-{kernel or 'own'}") / "service.log"
    env = {
        "MT_SCHEDULER": scheduler,
        "MT_FUSED_STEP": "true",
        "MT_FUSED_STEP_LIBRARY": str(fused_library),
        "MT_FUSED_STEP_KERNEL": kernel,
        "MT_MAX_WAIT_MS": "20",
        "MT_CACHE_MB": "0",  # every answer computed, none replayed from the translation cache
    }
    server = start_server(shipped_de_en, env, log_path)
    yield server
    server.stop()


def _answers(url: str, body: dict) -> list[dict]:
    if body.get("stream"):
        response, events = stream_translate(url, body, timeout=300)
        assert response.status_code == 200, response.text
        assert events[-1][0] == "done", events[-3:]
        final = finals(events)
        return [final[i] for i in range(len(body["texts"]))]
    response = httpx.post(url + "/v1/translate", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["translations"]


def test_every_text_under_mixed_load_gets_its_alone_answer(server):
    url = server.url
    models = httpx.get(url + "/v1/models", timeout=30).json()
    assert "fused" in str(models), models  # the fused step serves (GET /v1/models says why when it does not)
    rng = random.Random(56)
    bodies = []
    for i in range(CLIENTS * 2):
        texts = rng.sample(SENTENCES, rng.randint(1, 3))
        bodies.append({"texts": texts, **KINDS[i % len(KINDS)], "stream": i % 3 == 0})
    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(lambda body: (body, _answers(url, body)), bodies))
    steps = metric(url, "mt_decoder_step_rows_count") + metric(url, "mt_batch_size_count")
    assert steps > 0
    alone: dict = {}
    differ = []
    for body, got in answers:
        kind = {"beam_size": body["beam_size"]}
        for text, translation in zip(body["texts"], got, strict=True):
            key = (text, body["beam_size"])
            if key not in alone:
                alone[key] = _answers(url, {"texts": [text], **kind})[0]
            want = alone[key]
            if translation["text"] != want["text"] or abs(translation["score"] - want["score"]) > 1e-6:
                differ.append((text, kind, body["stream"], want["text"], translation["text"]))
    assert not differ, f"{len(differ)} answers differ from alone: {differ[:3]}"
