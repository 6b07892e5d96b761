"""/v1/translate with split_sentences (default on) and format html on the live server."""

from __future__ import annotations

import pytest
from html_structure import assert_same_markup
from protocol_helpers import v1_translate


def test_paragraph_is_translated_sentence_by_sentence(api):
    sentences = ["Ein Hund läuft.", "Eine Katze schläft.", "Zwei Kinder spielen."]
    [paragraph] = v1_translate(api, [" ".join(sentences)])
    one_by_one = [t["text"] for t in v1_translate(api, sentences)]
    assert paragraph["text"] == " ".join(one_by_one)
    assert paragraph["source_tokens"].count("</s>") == 3


@pytest.mark.parametrize(
    "text",
    ["eins\nzwei\ndrei", "  Ein Hund.\n\n\tEine Katze.  \n", "\n".join(f"Zeile {i}." for i in range(20)), "  ", ""],
)
def test_lines_in_lines_out(api, text):
    [out] = v1_translate(api, [text])
    assert len(out["text"].splitlines(keepends=True)) == len(text.splitlines(keepends=True))
    lead = len(text) - len(text.lstrip())
    assert out["text"][:lead] == text[:lead]
    if text.strip():
        trail = len(text) - len(text.rstrip())
        assert out["text"][len(out["text"]) - trail :] == text[len(text) - trail :]


def test_split_off_is_the_old_behaviour(api):
    text = "Ein Hund läuft. Eine Katze schläft."
    [off] = v1_translate(api, [text], split_sentences=False)
    assert off["source_tokens"].count("</s>") == 1


def test_paragraph_with_alignment_attention_and_hypotheses(api):
    [out] = v1_translate(
        api, ["Ein Hund läuft. Eine Katze schläft."], return_alignment=True, return_attention=True, num_hypotheses=2
    )
    rows = len(out["target_tokens"])
    assert all(0 <= s < len(out["source_tokens"]) and 0 <= t < rows for s, t in out["alignment"])
    assert len(out["attention"][0][0]) == rows and len(out["attention"][0][0][0]) == len(out["source_tokens"])
    assert len(out["hypotheses"]) == 2 and out["hypotheses"][0]["text"] == out["text"]


def test_html_format(api):
    fragment = '<p>Ein <b>großer</b> Hund.</p>\n<p lang="de">Eine <a href="/k">Katze</a> schläft.</p>'
    [out] = v1_translate(api, [fragment], format="html")
    assert_same_markup(fragment, out["text"])


def test_too_long_sentence_names_its_text(api):
    response = api.post("/v1/translate", json={"texts": ["Ein Hund.", "Hund. " + "Wort " * 300]})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "texts", 1]
