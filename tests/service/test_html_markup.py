"""HTML translation without a model (service/serving/html.py): a fake translator upper-cases words, keeping or
reversing their order, with exact alignments; the markup must come back whatever the word order."""

from __future__ import annotations

import pytest
from html_structure import assert_same_markup

from service.serving.html import HtmlPlan

FRAGMENTS = [
    '<p>Ein <b>großer</b> Hund läuft. Er ist <a href="/x?a=1&amp;b=2" title="T &amp; J">sehr schnell</a>!</p>',
    "<ul><li>eins</li><li>zwei <i>drei</i></li></ul>\n<ol><li>vier</li></ol>",
    '  Text mit <code>x &lt; y</code> Code und <span translate="no">Name</span> hier.<br>Neue Zeile  ',
    "<div>Vorher<p>Absatz</p>Nachher <!-- Kommentar --> Ende</div>",
    "<pre>  a\n b</pre><script>if (a < b) { go(); }</script><style>p > b { color: red }</style>",
    "<p><b><i>Tief</i> verschachtelt <u>und <s>noch</s> tiefer</u></b> Text</p>",
    '<a href="x"><img src="y.png" alt="Bild"></a> Ein Bild.',
    "Tom &amp; Jerry &lt;3 &copy; 2024",
    '<table><tr><th>Kopf</th></tr><tr><td data-x="1">Zelle <em>eins</em></td></tr></table>',
    '<p class="notranslate">Nicht übersetzen</p><p>Übersetzen</p>',
    "<h1>Titel</h1><p>Erster Satz. Zweiter Satz mit <strong>Betonung</strong>. Dritter.</p>",
    "Nur Text ohne Markup.",
    "<p>unvollständig <b>fett",
    "<p></p><br><hr>",
]


def fake(plan: HtmlPlan, reverse: bool):
    aligned = []
    for sentence in plan.sentences:
        words = sentence.split()
        order = list(range(len(words)))[:: -1 if reverse else 1]
        aligned.append(([words[i].upper() for i in order], order))
    return aligned


@pytest.mark.parametrize("reverse", [False, True], ids=["same-order", "reversed"])
@pytest.mark.parametrize("fragment", FRAGMENTS, ids=[str(i) for i in range(len(FRAGMENTS))])
def test_markup_is_kept(fragment, reverse):
    plan = HtmlPlan(fragment, "de")
    out = plan.render(fake(plan, reverse), "en")
    assert_same_markup(fragment, out)


def test_inline_tags_follow_their_words():
    plan = HtmlPlan('<p>Ein <b>großer</b> Hund und <a href="/k">eine Katze</a>.</p>', "de")
    assert plan.sentences == ["Ein großer Hund und eine Katze."]
    # "A big dog and a cat." with the alignment a translator would give
    out = plan.render([(["A", "big", "dog", "and", "a", "cat."], [0, 1, 2, 3, 4, 5])], "en")
    assert out == '<p>A <b>big</b> dog and <a href="/k">a cat.</a></p>'
    plan = HtmlPlan("<p>Der Hund ist <b>sehr</b> groß.</p>", "de")
    # reordered: "Very big is the dog." - the <b> moves with "sehr"
    out = plan.render([(["Very", "big", "is", "the", "dog."], [3, 4, 2, 0, 1])], "en")
    assert out == "<p><b>Very</b> big is the dog.</p>"


def test_untranslatable_content_and_whitespace_are_verbatim():
    fragment = "\n  <p>Rufe <code>ls -l &amp;&amp; echo</code> auf.</p>\n<pre>  x = 1\n</pre>  "
    plan = HtmlPlan(fragment, "de")
    assert plan.sentences == ["Rufe auf."]
    out = plan.render([(["Call", "up."], [0, 1])], "en")
    assert out == "\n  <p>Call <code>ls -l &amp;&amp; echo</code> up.</p>\n<pre>  x = 1\n</pre>  "


def test_entities_in_text_and_attributes():
    plan = HtmlPlan('<a title="a &amp; b &lt; c">Tom &amp; Jerry</a>', "de")
    assert plan.sentences == ["Tom & Jerry"]
    out = plan.render([(["Tom", "&", "Jerry"], [0, 1, 2])], "en")
    assert out == '<a title="a &amp; b &lt; c">Tom &amp; Jerry</a>'


def test_document_keeps_doctype_head_and_body():
    page = "<!DOCTYPE html><html><head><title>Titel</title><style>b{}</style></head><body><p>Hallo</p></body></html>"
    plan = HtmlPlan(page, "de")
    assert plan.sentences == ["Titel", "Hallo"]
    out = plan.render([(["Title"], [0]), (["Hello"], [0])], "en")
    assert out.startswith("<!DOCTYPE html>") and "<title>Title</title>" in out and "<p>Hello</p>" in out
    assert "<style>b{}</style>" in out


def test_control_characters_and_empty_input():
    assert HtmlPlan("", "de").render([], "en") == ""
    assert HtmlPlan("  \n", "de").render([], "en") == "  \n"
    plan = HtmlPlan("<p>a\x00b</p>", "de")
    assert plan.render(fake(plan, False), "en") == "<p>A\ufffdB</p>"
