"""Matching glossary terms and do-not-translate spans, and checking translations (service/serving/terms.py)."""

from __future__ import annotations

import pytest

from engine.translation import Translation
from service.serving.terms import Terms, Use, recase, recase_words, settle, warnings


@pytest.mark.parametrize(
    ("term", "sentence", "found"),
    [
        ("Arzt", "Der Arzt kommt.", "Arzt"),
        ("Arzt", "Die Ärzte kommen.", "Ärzte"),
        ("Arzt", "Den Ärzten hilft das.", "Ärzten"),
        ("Arzt", "Die Frau des Arztes.", "Arztes"),
        ("Haus", "Die Häuser sind alt.", "Häuser"),
        ("Kundin", "Die Kundinnen warten.", "Kundinnen"),
        ("Blume", "Viele Blumen.", "Blumen"),
        ("rotes Auto", "Das rote   Autos", None),  # only the last word takes endings
        ("rotes Auto", "Zwei rotes   Autos", "rotes   Autos"),
        ("Arzt", "Die Arztpraxis.", None),  # no match inside a longer word
        ("Ei", "Das Eis schmilzt.", None),  # short terms match as written
        ("EU", "Die eu ist groß.", None),  # acronyms keep their capitals
        ("EU", "Die EU ist groß.", "EU"),
    ],
)
def test_german_source_matching(term, sentence, found):
    uses = Terms({term: "x"}).find(sentence, "de")
    assert [u.found for u in uses] == ([found] if found else [])


def test_english_source_has_no_german_endings_and_chinese_no_word_boundaries():
    assert Terms({"Arzt": "x"}).find("Ärzte", "en") == []
    assert [u.found for u in Terms({"医生": "doctor"}).find("他是医生。", "zh")] == ["医生"]


def test_longest_term_wins_and_spans_win_over_terms():
    terms = Terms({"Bank": "bench", "Deutsche Bank": "Deutsche Bank AG"}, ["Bank of X"])
    assert [(u.found, u.copy) for u in terms.find("Die Deutsche Bank und Bank of X", "de")] == [
        ("Deutsche Bank", False),
        ("Bank of X", True),
    ]


def test_settle_restores_spans_and_names_what_is_missing():
    uses = [Use("Arzt", "Arzt", "physician"), Use("ACME", "ACME", "ACME", copy=True), Use("Z", "Z", "Z", copy=True)]
    t = Translation("The physician of ⁇CME.", 0.0, [1], [2])
    settle(t, uses, lambda text: "⁇CME" if text == "ACME" else text)
    assert t.text == "The physician of ACME." and [u.source for u in t.missing] == ["Z"]
    assert [w["code"] for w in warnings(t)] == ["do_not_translate_missing"]
    t = Translation("The doctor.", 0.0, [1], [2])
    settle(t, uses[:1], str)
    assert [w["code"] for w in warnings(t)] == ["glossary_term_missing"]


def test_recase_capitalises_only_at_the_start():
    uses = [Use("Arzt", "Arzt", "physician")]
    assert recase("Physician sees Physician.", uses) == "Physician sees physician."
    assert recase("«physician sees", uses) == "«Physician sees"


def test_recase_words_cases_a_term_among_the_words_html_and_documents_render():
    uses = [Use("Hund", "Hund", "hound")]
    assert recase_words(["small", "Hound", "plays"], uses) == ["small", "hound", "plays"]
    assert recase_words(["small  Hound", "plays"], uses) == ["small  hound", "plays"]  # a word with spaces
    assert recase_words(["hound", "plays"], uses) == ["Hound", "plays"]  # it begins the sentence
    assert recase_words(["small", "Hound"], []) == ["small", "Hound"]  # no terms: as given
