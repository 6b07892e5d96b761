"""LibreTranslate's API through libretranslatepy (its Python client, which posts forms) and plain HTTP (JSON)."""

from __future__ import annotations

import urllib.error

import pytest
from html_structure import assert_same_markup
from libretranslatepy import LibreTranslateAPI
from protocol_helpers import v1_translate

TEXT = "Ein Mann fährt mit dem Fahrrad durch die Stadt."


@pytest.fixture(scope="module")
def lt(live_server) -> LibreTranslateAPI:
    return LibreTranslateAPI(live_server.url)


def test_libretranslatepy_translate_detect_languages(lt, api):
    assert lt.translate(TEXT, "de", "en") == v1_translate(api, [TEXT])[0]["text"]
    detections = lt.detect("Guten Morgen, wie geht es dir heute?")
    assert detections[0]["language"] == "de" and 50 < detections[0]["confidence"] <= 100
    assert [d["confidence"] for d in detections] == sorted((d["confidence"] for d in detections), reverse=True)
    languages = {entry["code"]: entry for entry in lt.languages()}
    assert languages["de"] == {"code": "de", "name": "German", "targets": ["en"]}
    assert languages["en"]["name"] == "English"


def test_libretranslatepy_html_and_errors(lt):
    # libretranslatepy has no format argument: it sends text, so markup is translated as text; HTML below is JSON
    with pytest.raises(urllib.error.HTTPError) as info:
        lt.translate(TEXT, "fr", "en")
    assert info.value.code == 400 and b'"error"' in info.value.read()


def test_json_batch_auto_alternatives(api):
    texts = [TEXT, "Zwei Hunde spielen im Schnee."]
    answer = api.post("/translate", json={"q": texts, "source": "auto", "target": "en", "alternatives": 2}).json()
    assert answer["translatedText"] == [t["text"] for t in v1_translate(api, texts)]
    assert [d["language"] for d in answer["detectedLanguage"]] == ["de", "de"]
    assert len(answer["alternatives"]) == 2 and all(len(a) <= 2 for a in answer["alternatives"])
    assert all(text not in alts for text, alts in zip(answer["translatedText"], answer["alternatives"], strict=True))
    single = api.post("/translate", json={"q": TEXT, "source": "de", "target": "en"}).json()
    assert set(single) == {"translatedText", "warnings"} and isinstance(single["translatedText"], str)
    assert single["warnings"] == v1_translate(api, [TEXT])[0]["warnings"]  # ours beside LibreTranslate's fields


def test_form_body_with_line_breaks(api):
    lines = "Ein Hund.\r\nEine Katze.\r\n\r\nEin Vogel."
    answer = api.post("/translate", data={"q": lines, "source": "de", "target": "en"}).json()
    assert answer["translatedText"].count("\n") == 3 and "\n\n" in answer["translatedText"]
    multipart = api.post("/translate", files={"q": (None, TEXT), "source": (None, "de"), "target": (None, "en")})
    assert multipart.status_code == 200 and multipart.json()["translatedText"] == v1_translate(api, [TEXT])[0]["text"]


HTML = [
    '<p>Ein <b>großer</b> Hund läuft über <a href="/wiese?x=1&amp;y=2" title="Wiese &amp; Feld">die Wiese</a>.</p>',
    "<ul><li>Ein Hund</li><li>Zwei <i>kleine</i> Katzen</li></ul>",
    '<div>Ein Mann <span translate="no">Müller</span> und <code>x &lt; y</code> hier.<br>Neue Zeile.</div>',
    "<p>Tom &amp; Jerry &copy; spielen.</p><!-- Kommentar --><pre>  bleibt\n  so</pre>",
    "<table><tr><td>Ein <em>roter</em> Ball</td><td>Zwei Bälle</td></tr></table>",
    "<p><b><i>Ein</i> Mann</b> fährt <u>mit dem <s>roten</s> Fahrrad</u>.</p>",
]


@pytest.mark.parametrize("fragment", HTML, ids=[str(i) for i in range(len(HTML))])
def test_html_keeps_structure(api, fragment):
    answer = api.post("/translate", json={"q": fragment, "source": "de", "target": "en", "format": "html"})
    assert answer.status_code == 200, answer.text
    assert_same_markup(fragment, answer.json()["translatedText"])
    v1 = api.post("/v1/translate", json={"texts": [fragment], "format": "html"}).json()["translations"][0]["text"]
    assert v1 == answer.json()["translatedText"]


@pytest.mark.parametrize(
    "body, needle",
    [
        ({"source": "de", "target": "en"}, "missing q parameter"),
        ({"q": "", "source": "de", "target": "en"}, "missing q parameter"),
        ({"q": "Hund", "target": "en"}, "missing source parameter"),
        ({"q": "Hund", "source": "de"}, "missing target parameter"),
        ({"q": "Hund", "source": "de", "target": "en", "format": "pdf"}, "pdf format is not supported"),
        ({"q": "Hund", "source": "de", "target": "en", "alternatives": 99}, "alternatives parameter must be <="),
        ({"q": "Hund", "source": "de", "target": "en", "alternatives": "2"}, "alternatives parameter is not a number"),
        ({"q": "Hund", "source": "de", "target": "fr"}, "no model translates de->fr"),
        ({"q": "Hund", "source": "auto", "target": "fr"}, "no model translates into fr"),
        ({"q": ["a"] * 65, "source": "de", "target": "en"}, "exceeds text limit"),
        ({"q": [1], "source": "de", "target": "en"}, "list of strings"),
        ({"q": "Hund", "source": "de", "target": "en", "api_key": 5}, "api_key must be a string"),
        ({"q": "Hund", "source": "de", "target": "en", "api_key": None}, "api_key must be a string"),
    ],
)
def test_bad_requests_400(api, body, needle):
    response = api.post("/translate", json=body)
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"} and needle in response.json()["error"]


def test_bad_json_and_detect_errors(api):
    response = api.post("/translate", content=b"[1]", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json() == {"error": "Invalid JSON format"}
    response = api.post("/detect", data={})
    assert response.status_code == 400 and "missing q parameter" in response.json()["error"]
    response = api.post("/detect", json={"q": "Hund", "api_key": None})  # schemathesis found this one accepted
    assert response.status_code == 400 and "api_key must be a string" in response.json()["error"]


def test_fields_in_the_query_string_a_repeated_q_and_health(api):
    """LibreTranslate reads the query string and the form alike (Flask's request.values): clients that send
    their fields in the URL of a POST with an empty body, or a batch as a repeated form field, are answered."""
    expected = v1_translate(api, [TEXT, "Eine Katze."])
    in_url = api.post("/translate", params={"q": TEXT, "source": "de", "target": "en"})
    assert in_url.status_code == 200, in_url.text
    assert in_url.json() == {"translatedText": expected[0]["text"], "warnings": expected[0]["warnings"]}
    form_batch = api.post("/translate", data={"q": [TEXT, "Eine Katze."], "source": "de", "target": "en"})
    assert form_batch.status_code == 200 and form_batch.json()["translatedText"] == [t["text"] for t in expected]
    multipart_batch = api.post(
        "/translate", files=[("q", (None, TEXT)), ("q", (None, "Eine Katze.")), ("source", (None, "de"))],
        params={"target": "en"},
    )  # fmt: skip
    assert multipart_batch.json()["translatedText"] == [t["text"] for t in expected]
    url_batch = api.post("/translate?q=Ein%20Hund%20l%C3%A4uft.&q=Eine%20Katze.&source=de&target=en")
    assert url_batch.json()["translatedText"] == [
        v1_translate(api, ["Ein Hund läuft."])[0]["text"],
        expected[1]["text"],
    ]
    detected = api.post("/detect", params={"q": TEXT})
    assert detected.status_code == 200 and detected.json()[0]["language"] == "de"
    twice = api.post("/translate", data={"q": TEXT, "source": ["de", "en"], "target": "en"})
    assert twice.status_code == 400 and "source given more than once" in twice.json()["error"]
    json_wins = api.post("/translate", params={"q": "ignored"}, json={"q": TEXT, "source": "de", "target": "en"})
    assert json_wins.json()["translatedText"] == expected[0]["text"]  # a JSON body alone, as LibreTranslate
    assert api.get("/health").json() == {"status": "ok"}
    assert api.post("/health").status_code == 405
