"""POST /v1/translate with "stream": true through the real server: deltas that add up to the final text, a final
event per text equal to the non-streaming answer, errors as events, HTTP errors before the stream starts."""

from __future__ import annotations

import httpx
import pytest
from live_server import LiveServer
from sse_events import finals, stream_translate, texts_of

TEXTS = [
    "ein kind rennt im park und spielt",
    "eine kleine rote katze sitzt unter dem blauen ball. der hund spielt.",
    "",
    "der hund",
    "  die katze sitzt auf dem ball\n\nein mann spielt  ",
]
BODIES = [
    {"texts": TEXTS, "beam_size": 1},
    {"texts": TEXTS, "beam_size": 4},
    {"texts": TEXTS, "beam_size": 3, "num_hypotheses": 2, "length_penalty": 1.0},
    {"texts": TEXTS, "beam_size": 2, "max_length": 3},
]


@pytest.fixture(scope="module")
def continuous_server(tiny_repository, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("continuous") / "service.log"
    server = LiveServer(tiny_repository, env={"MT_SCHEDULER": "continuous"}, log_path=log_path).start()
    yield server
    server.stop()


@pytest.fixture(params=["continuous", "dynamic"])
def server(request, continuous_server, live_server):
    return continuous_server if request.param == "continuous" else live_server


@pytest.mark.parametrize("body", BODIES, ids=["greedy", "beam4", "nbest", "max_length"])
def test_deltas_add_up_to_the_final_text_and_the_final_event_is_the_plain_answer(server, body):
    plain = httpx.post(server.url + "/v1/translate", json=body, timeout=60).json()
    response, events = stream_translate(server.url, body)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == ("done", {"model": plain["model"], "version": plain["version"]})
    assert [e for e, _ in events].count("translation") == len(TEXTS)
    streamed, final = texts_of(events), finals(events)
    for i, expected in enumerate(plain["translations"]):
        assert final[i] == expected
        assert streamed.get(i, "") == expected["text"]
    for i in range(len(TEXTS)):  # a text's deltas all come before its final event
        deltas = [k for k, (e, d) in enumerate(events) if e == "delta" and d["index"] == i]
        done = next(k for k, (e, d) in enumerate(events) if e == "translation" and d["index"] == i)
        assert all(k < done for k in deltas)


def test_continuous_batching_streams_word_by_word(continuous_server):
    """With continuous batching a long text's words come in several events (one per new complete word at most)."""
    text = "eine kleine rote katze sitzt unter dem blauen ball und ein hund rennt im park"
    for beam in (1, 4):
        _, events = stream_translate(continuous_server.url, {"texts": [text], "beam_size": beam})
        deltas = [d["text"] for e, d in events if e == "delta"]
        assert len(deltas) >= 3, deltas
        assert all(d.strip() for d in deltas)  # whole words, never an empty or blank piece
    models = httpx.get(continuous_server.url + "/v1/models").json()["models"]
    assert models[0]["scheduler"] == "continuous"


def test_errors_after_the_stream_began_are_error_events_with_the_status(server):
    _, events = stream_translate(server.url, {"texts": ["der hund spielt"] * 40, "beam_size": 8, "timeout_s": 0.001})
    assert events[-1][0] == "error" and events[-1][1]["code"] == 504, events[-3:]
    assert "deadline" in events[-1][1]["detail"]


def test_what_is_refused_before_any_work_keeps_its_http_status(server):
    response, events = stream_translate(server.url, {"texts": ["der hund"], "beam_size": 99})
    assert response.status_code == 422 and not events
    response, events = stream_translate(server.url, {"texts": ["der hund"], "model": "nope"})
    assert response.status_code == 404 and not events
