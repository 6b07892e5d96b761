"""HTML translations (issue 55): closing punctuation stays outside the tag around the word it ends, a sentence's
first word is cased as the source's, and the answer has /v1's warnings and confidence like a plain text's."""

from __future__ import annotations

import json
import re

import httpx

from service.serving.html import HtmlPlan
from service.serving.words import is_glued, match_initial_case, split_punctuation


def render(markup: str, words: list[str], links: list[int | None]) -> str:
    plan = HtmlPlan(markup, "de")
    return plan.render([split_punctuation(words, links)], "en")


def test_punctuation_after_a_tagged_word_stays_outside_the_tag():
    assert render("<p>Das Essen war <b>gut</b>.</p>", ["The", "food", "was", "good."], [0, 1, 2, 3]) == (
        "<p>The food was <b>good</b>.</p>"
    )
    assert render('<p>Ich habe <a href="x">Maria</a> gesehen.</p>', ["I", "saw", "Mary."], [0, 3, 2]) == (
        '<p>I saw <a href="x">Mary</a>.</p>'
    )
    assert render("<p>Der <b>Hund</b>, die Katze.</p>", ["The", "dog,", "the", "cat."], [0, 1, 2, 3]) == (
        "<p>The <b>dog</b>, the cat.</p>"
    )


def test_words_and_punctuation():
    assert split_punctuation(["good.", "Hi!?", "...", "U.S.", "x"], [3, 0, 1, 2, None]) == (
        ["good", ".", "Hi", "!?", "...", "U.S", ".", "x"],
        [3, None, 0, None, 1, 2, None, None],
    )
    assert is_glued(".") and is_glued("!?") and not is_glued("a.") and not is_glued("")


def test_the_first_letter_follows_the_sources():
    assert match_initial_case("Willkommen", "welcome") == "Welcome"
    assert match_initial_case("„Willkommen“", '"welcome"') == '"Welcome"'
    assert match_initial_case("iPhone ist gut", "iPhone is good") == "iPhone is good"
    assert match_initial_case("我们明天去北京。", "we go to Beijing tomorrow.") == "we go to Beijing tomorrow."
    assert match_initial_case("Das", "") == ""


def test_shipped_model_html_answers(shipped_models):
    body = {
        "texts": ["<p>Das Essen war <b>gut</b>.</p>", "<h1>Willkommen</h1>", "<p>Der Hund schläft.</p>"],
        "format": "html",
        "source_language": "de",
    }
    answer = httpx.post(shipped_models.url + "/v1/translate", json=body, timeout=120).json()["translations"]
    assert answer[0]["text"] == "<p>The food was <b>good</b>.</p>"
    assert answer[1]["text"] == "<h1>Welcome</h1>"
    for t in answer:
        assert isinstance(t["warnings"], list) and 0.0 <= t["confidence"] <= 1.0
    french = {"texts": ["<p>Bonjour, comment allez-vous ?</p>"], "format": "html", "source_language": "de"}
    [t] = httpx.post(shipped_models.url + "/v1/translate", json=french, timeout=60).json()["translations"]
    assert any(w["code"] == "language_mismatch" and "looks like fr" in w["message"] for w in t["warnings"])


def test_a_one_word_heading_is_cased_alike_plain_streamed_and_html(shipped_models):
    url = shipped_models.url + "/v1/translate"
    plain = httpx.post(url, json={"texts": ["Willkommen"], "source_language": "de"}, timeout=60).json()
    assert plain["translations"][0]["text"] == "Welcome"
    streamed = httpx.post(url, json={"texts": ["Willkommen"], "source_language": "de", "stream": True}, timeout=60)
    events = re.findall(r"event: (\w+)\r?\ndata: (.*?)\r?\n", streamed.text)
    deltas = [json.loads(d)["text"] for e, d in events if e == "delta"]
    assert "".join(deltas) == "Welcome"
