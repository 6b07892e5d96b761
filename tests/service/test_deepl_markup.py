"""What the DeepL API adds to the text and markup paths, without a model: ignore_tags, XML's rules (structure by
whitespace, splitting and non-splitting tags, no DTD), split_sentences=nonewlines, billed characters, codes."""

from __future__ import annotations

import pytest

from service.protocols.deepl.mapping import billed_characters
from service.serving.html import HTML, HtmlPlan, Markup, MarkupError
from service.serving.segmentation import join, split_text

XML = Markup(xml=True)
DOCUMENT = (
    '<?xml version="1.0"?>\n<document><meta><title>Ein Titel</title></meta>'
    "<content><par>Erster Satz. Zweiter <i>Satz</i>.</par>"
    "<par>Dritter <keep>X y</keep> Satz.</par></content></document>"
)


def upper(plan: HtmlPlan) -> str:
    return plan.render([(s.upper().split(), list(range(len(s.split())))) for s in plan.sentences], "en")


def test_ignored_html_tags_are_copied_untranslated():
    html = "<p>Ein Hund <x-name>Bello Bär</x-name> läuft.</p>"
    assert "Bello Bär" in " ".join(HtmlPlan(html, "de").sentences)
    plan = HtmlPlan(html, "de", True, Markup(ignore=frozenset({"x-name"})))
    assert plan.sentences == ["Ein Hund läuft."]
    assert upper(plan) == "<p>EIN HUND <x-name>Bello Bär</x-name> LÄUFT.</p>"


def test_xml_structure_comes_from_whitespace_only_elements():
    plan = HtmlPlan(DOCUMENT, "de", True, Markup(xml=True, ignore=frozenset({"keep"})))
    assert plan.sentences == ["Ein Titel", "Erster Satz.", "Zweiter Satz.", "Dritter Satz."]
    out = upper(plan)
    assert out.startswith('<?xml version="1.0"?>\n<document><meta><title>EIN TITEL</title></meta>')
    assert "<keep>X y</keep>" in out and "<i>" in out


def test_xml_splitting_and_non_splitting_tags_and_outline_off():
    xml = "<r><a>Eins zwei</a> <b>drei vier</b></r>"
    assert HtmlPlan(xml, "de", True, XML).sentences == ["Eins zwei", "drei vier"]
    joined = Markup(xml=True, non_splitting=frozenset({"a", "b"}))
    assert HtmlPlan(xml, "de", True, joined).sentences == ["Eins zwei drei vier"]
    off = Markup(xml=True, outline=False, splitting=frozenset({"b"}))
    assert HtmlPlan(xml, "de", True, off).sentences == ["Eins zwei", "drei vier"]
    assert HtmlPlan(xml, "de", True, Markup(xml=True, outline=False)).sentences == ["Eins zwei drei vier"]


@pytest.mark.parametrize("xml", ["<a><b></a>", "<!DOCTYPE a [<!ENTITY e 'x'>]><a>&e;</a>", "<a>&nbsp;</a>", "<a/><b"])
def test_xml_that_is_not_well_formed_or_declares_entities_is_refused(xml):
    with pytest.raises(MarkupError):
        HtmlPlan(xml, "de", True, XML)


def test_nonewlines_splits_at_punctuation_only_and_keeps_breaks_between_sentences():
    text = "Ein Hund\nläuft. Zwei Katzen.\n\nDritter Satz.  "
    layout = split_text(text, "de", "nonewlines")
    assert layout.sentences == ("Ein Hund läuft.", "Zwei Katzen.", "Dritter Satz.")
    assert (
        join(layout, [s.upper() for s in layout.sentences], "en") == "EIN HUND LÄUFT. ZWEI KATZEN.\n\nDRITTER SATZ.  "
    )
    assert split_text(text, "de", True).sentences == ("Ein Hund", "läuft.", "Zwei Katzen.", "Dritter Satz.")
    assert split_text("  ", "de", "nonewlines").sentences == ()


def test_billed_characters_leave_markup_out():
    assert billed_characters("Grüße, 深", "text", HTML) == 8
    assert billed_characters('<h1 style="color:red">Ein Titel</h1>', "html", HTML) == len("Ein Titel")
    assert billed_characters("<a>x<!-- nicht --></a>y", "html", XML) == 2
