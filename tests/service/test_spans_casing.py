"""Real-world text (service/serving/spans.py, casing.py, core/numbers.py): the spans a sentence must keep, numbers
in the target's convention, all-caps and Title-Case sentences truecased and recased, and the warnings of what a
translation lacks."""

from __future__ import annotations

import pytest

from core.numbers import number_value, written_in
from engine.translation import Translation
from service.serving.casing import casing_of, recased, truecased
from service.serving.spans import find_spans, merged
from service.serving.terms import Terms, Use, settle, warnings


def _found(sentence: str, source: str = "de", target: str = "en") -> list[tuple[str, str, str]]:
    return [(u.kind, u.found, u.target) for u in find_spans(sentence, source, target)]


@pytest.mark.parametrize(
    ("sentence", "span"),
    [
        ("Weitere Informationen finden Sie unter https://www.beispiel.de/hilfe.", "https://www.beispiel.de/hilfe"),
        ("Schreiben Sie an max.mustermann@firma.de bitte.", "max.mustermann@firma.de"),
        ("Die Datei liegt unter /var/log/syslog heute.", "/var/log/syslog"),
        ("Folgen Sie @beispiel_de auf Mastodon.", "@beispiel_de"),
        ("Alles zum Thema #Energiewende hier.", "#Energiewende"),
        ("Installieren Sie Version 2.3.1 jetzt.", "2.3.1"),
        ("Ihre Bestellung A-2024-88731 ist unterwegs.", "A-2024-88731"),
        ("Die Lieferung SKU-7B-2 fehlt.", "SKU-7B-2"),
        ("Die Lücke CVE-2024-1234 ist geschlossen.", "CVE-2024-1234"),
        ("Führen Sie `pip install mtserve` aus.", "`pip install mtserve`"),
        ("Das hat Spaß gemacht 🎉 danke!", "🎉"),
    ],
)
def test_spans_are_found_and_copied_as_written(sentence: str, span: str) -> None:
    assert ("span", span, span) in _found(sentence)


def test_numbers_in_the_targets_convention_times_and_dates_as_written() -> None:
    found = _found("Der Umsatz stieg am 12.05.2024 um 16:45 Uhr auf 1.250.000 Euro, also um 12,5 %.")
    assert found == [
        ("number", "12.05.2024", "12.05.2024"),
        ("number", "16:45", "16:45"),
        ("number", "1.250.000", "1,250,000"),
        ("number", "12,5", "12.5"),
    ]
    assert _found("马云于1999年在杭州创立了阿里巴巴。", "zh", "en") == [("number", "1999", "1999")]
    assert _found("It costs 1,250.50 dollars.", "en", "de") == [("number", "1,250.50", "1.250,50")]
    assert number_value("1.5", "de") is None and written_in("1.5", "de", "en") is None
    assert _found("Ein Satz ohne Zahlen.") == []


def test_the_requests_own_terms_win_where_they_overlap() -> None:
    sentence = "Die Version 2.3.1 von ThinkPad X1 kostet 1.000 Euro."
    given = Terms(do_not_translate=["ThinkPad X1"], glossary={"Version 2.3.1": "release 2.3.1"}).find(sentence, "de")
    uses = merged(given, find_spans(sentence, "de", "en"), sentence)
    assert [(u.kind, u.found) for u in uses] == [("", "Version 2.3.1"), ("", "ThinkPad X1"), ("number", "1.000")]


def test_casing_of_sentences() -> None:
    assert casing_of("ACHTUNG: BETRETEN DER BAUSTELLE VERBOTEN!") == "upper"
    assert casing_of("Weitere Informationen Finden Sie Hier") == "title"
    assert casing_of("Der Hund läuft im Park.") is None and casing_of("Die EU und die USA.") is None
    assert casing_of("OK!") is None  # too few letters to judge


def test_truecasing_picks_each_words_frequent_form_and_recasing_restores() -> None:
    vocabulary = {"Achtung", "Baustelle", "verboten", "der", "betreten", "schließen", "Bitte"}

    def pieces(word: str) -> list[int]:  # a word the vocabulary has is one piece, any other form one per letter
        return [0] if word in vocabulary else [0] * len(word)

    assert truecased("ACHTUNG: BETRETEN DER BAUSTELLE VERBOTEN!", pieces) == "Achtung: betreten der Baustelle verboten!"
    assert truecased("BITTE SCHLIESSEN", pieces) == "Bitte schließen"
    assert recased("Caution: no entry to the site!", "upper") == "CAUTION: NO ENTRY TO THE SITE!"
    assert recased("more information can be found here", "title") == "More Information Can Be Found Here"
    assert recased("unchanged", None) == "unchanged"


def test_settle_recases_and_names_missing_numbers_and_spans() -> None:
    uses = find_spans("Siehe https://a.de/x für 1.250 Stück.", "de", "en") + [Use("", "", "upper", kind="casing")]
    t = settle(Translation("see the page for 1,250 pieces.", -1.0, [], [2]), uses, lambda text: text)
    assert t.text == "SEE THE PAGE FOR 1,250 PIECES."
    assert [w["code"] for w in warnings(t)] == ["protected_span_missing"]
    t = settle(Translation("see https://a.de/x for 1250 pieces.", -1.0, [], [2]), uses[:2], lambda text: text)
    assert [w["code"] for w in warnings(t)] == ["number_mismatch"] and "1,250" in warnings(t)[0]["message"]


def test_characters_the_vocabulary_lacks_are_written_as_equivalents_it_has() -> None:
    from core.normalize import fold_unknown

    known = set("abcdefghijklmnopqrstuvwxyzJ\"'-. ")

    def spelled_in_bytes(ch: str) -> bool:
        return ch not in known

    assert fold_unknown("„Jetzt“ – ＂gut＂ … ok", spelled_in_bytes) == '"Jetzt" - "gut" ... ok'
    assert fold_unknown("ein ü bleibt", spelled_in_bytes) == "ein ü bleibt"  # no equivalent: kept
    assert fold_unknown("„x“", lambda ch: False) == "„x“"  # a model that knows a character keeps it


def test_decoded_byte_pieces_never_give_an_invalid_character(tmp_path) -> None:
    """Random sequences of byte pieces and ordinary pieces, most of them broken UTF-8: the text never holds U+FFFD
    and always encodes as UTF-8."""
    import random

    from core.tokenizer import Tokenizer
    from model.tokenizer import train_tokenizer

    texts = ["der hund läuft im park", "ein kind spielt mit dem ball", "大家早上好"] * 50
    path = train_tokenizer(texts, tmp_path / "t.model", 320, character_coverage=0.99)
    tok = Tokenizer(path)
    byte_ids = [i for i in range(tok.vocab_size) if tok.sp.is_byte(i)]
    word_ids = [i for i in range(tok.vocab_size) if not tok.sp.is_byte(i) and i > 3]
    rng = random.Random(0)
    for _ in range(500):
        ids = [rng.choice(byte_ids if rng.random() < 0.6 else word_ids) for _ in range(rng.randint(1, 12))]
        text = tok.decode(ids)
        assert "\ufffd" not in text
        text.encode("utf-8")


def test_german_ordinals_and_number_compounds_are_no_spans_or_checked_numbers() -> None:
    assert _found("Am 27. Juli kamen in den 1970-er Jahren 100-prozentig alle.") == []


def test_a_number_the_model_wrote_in_the_sources_convention_is_rewritten() -> None:
    uses = find_spans("Es kamen 81.360 Zuschauer.", "de", "en")
    t = settle(Translation("There were 81.360 spectators.", -1.0, [], [2]), uses, lambda text: text)
    assert t.text == "There were 81,360 spectators." and warnings(t) == []
