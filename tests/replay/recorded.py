"""The recorded requests (issue 58): one list, sent in order to a fresh server, every answer compared byte for byte.

A request is a dict: ``method``, ``path`` (``{name}`` filled from an earlier answer's ``save``), and one of ``json``,
``data`` (a form), ``files`` (``{field: [filename, text, content type]}``, with ``data`` beside it), ``content`` (a
raw body); ``headers``; ``save`` ({name: key of the JSON answer}); ``poll`` ({"key": ..., "until": [...]}: sent again
until the answer's key is one of these, the last answer recorded). The names are the keys of answers.json.

Left out because their answers are not reproducible: GET /metrics and the Open Inference Protocol's statistics
(/v2/models/stats: counts and nanoseconds of this process), the document jobs' intermediate states (only the
answer once a job has ended is recorded), /v1/models/{name}/load (swaps a model: another test's matter). Normalized
(replay_harness.py): 32-hex ids, times, the server's address, and the order in which a stream's texts interleave.
"""

from __future__ import annotations

DE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."
DE2 = "Ein Hund rennt im Park."
DE_PARAGRAPH = "Der Arzt kommt morgen. Er bringt die Unterlagen mit.\n\nDie Sitzung beginnt um 9 Uhr."
ZH = "这本书很有意思。"
DEEPL_KEY = {"Authorization": "DeepL-Auth-Key replay-key"}
MARKDOWN = "# Bericht\n\nEin Hund rennt im Park.\n\n- Der Arzt kommt morgen.\n- Die Katze schläft.\n"


def v1(name: str, path: str, body: dict, **extra) -> dict:
    return {"name": name, "method": "POST", "path": path, "json": body, **extra}


REQUESTS: list[dict] = [
    # /v1: translate (greedy, beam, n-best, languages, options), alignment, attention, embeddings
    {"name": "models", "method": "GET", "path": "/v1/models"},
    {"name": "healthz", "method": "GET", "path": "/healthz"},
    {"name": "readyz", "method": "GET", "path": "/readyz"},
    v1("translate_beam", "/v1/translate", {"texts": [DE], "beam_size": 4}),
    v1("translate_greedy", "/v1/translate", {"texts": [DE, DE2], "beam_size": 1}),
    v1("translate_nbest", "/v1/translate", {"texts": [DE2], "beam_size": 4, "num_hypotheses": 3}),
    v1(
        "translate_auto",
        "/v1/translate",
        {"texts": [ZH, "Ein Hund rennt."], "source_language": "auto", "target_language": "en"},
    ),
    v1("translate_zh", "/v1/translate", {"texts": [ZH], "model": "zh-en", "beam_size": 2}),
    v1(
        "translate_options",
        "/v1/translate",
        {"texts": [DE], "beam_size": 3, "length_penalty": 1.0, "no_repeat_ngram_size": 2, "max_length": 12},
    ),
    v1("translate_paragraph", "/v1/translate", {"texts": [DE_PARAGRAPH]}),
    v1("translate_unsplit", "/v1/translate", {"texts": [DE_PARAGRAPH], "split_sentences": False, "beam_size": 1}),
    v1(
        "translate_html",
        "/v1/translate",
        {"texts": ["<p>Ein <b>Hund</b> rennt im <a href='/p'>Park</a>.</p>"], "format": "html"},
    ),
    v1("translate_spans", "/v1/translate", {"texts": ["Schreiben Sie an info@example.com, es kostet 1.250,50 Euro."]}),
    v1("translate_glossary", "/v1/translate", {"texts": ["Der Arzt kommt morgen."], "glossary": {"Arzt": "physician"}}),
    v1(
        "translate_glossary_greedy",
        "/v1/translate",
        {"texts": ["Der Arzt kommt morgen."], "beam_size": 1, "glossary": {"Arzt": "physician"}},
    ),
    v1(
        "translate_do_not_translate",
        "/v1/translate",
        {"texts": ["Die Firma Apfelbaum baut Häuser."], "do_not_translate": ["Apfelbaum"]},
    ),
    v1("alignment", "/v1/translate", {"texts": [DE2], "return_alignment": True}),
    v1("translate_attention", "/v1/translate", {"texts": [DE2], "return_attention": True, "beam_size": 1}),
    v1("attention_cross_mean", "/v1/attention", {"source": DE2, "kinds": ["cross"], "aggregate": "mean"}),
    v1(
        "attention_target",
        "/v1/attention",
        {
            "source": DE2,
            "target": "A dog runs in the park.",
            "kinds": ["encoder", "decoder", "cross"],
            "layers": [0],
            "heads": [0],
        },
    ),
    v1("embed_mean", "/v1/embed", {"texts": [DE2, "Ein Hund läuft durch den Park."], "pooling": "mean"}),
    v1("embed_zh", "/v1/embed", {"texts": [ZH], "model": "zh-en"}),
    v1("stream", "/v1/translate", {"texts": [DE, DE2], "beam_size": 4, "stream": True}),
    # /v1 errors
    v1("error_empty_texts", "/v1/translate", {"texts": []}),
    v1("error_unknown_field", "/v1/translate", {"texts": [DE], "beam": 4}),
    v1("error_nbest_over_beam", "/v1/translate", {"texts": [DE], "beam_size": 2, "num_hypotheses": 3}),
    v1("error_unknown_model", "/v1/translate", {"texts": [DE], "model": "fr-en"}),
    v1("error_string_beam", "/v1/translate", {"texts": [DE], "beam_size": "4"}),
    v1("error_unserved_pair", "/v1/translate", {"texts": [DE], "source_language": "de", "target_language": "fr"}),
    {
        "name": "error_not_json",
        "method": "POST",
        "path": "/v1/translate",
        "content": "texts=1",
        "headers": {"content-type": "application/json"},
    },
    # /v1 glossaries
    v1(
        "glossary_create",
        "/v1/glossaries",
        {
            "name": "medical",
            "source_language": "de",
            "target_language": "en",
            "entries": {"Arzt": "physician", "Unterlagen": "records"},
        },
        save={"glossary": "glossary_id"},
    ),
    {"name": "glossary_get", "method": "GET", "path": "/v1/glossaries/{glossary}"},
    {"name": "glossary_entries", "method": "GET", "path": "/v1/glossaries/{glossary}/entries"},
    {"name": "glossary_list", "method": "GET", "path": "/v1/glossaries"},
    v1(
        "translate_glossary_id",
        "/v1/translate",
        {"texts": ["Der Arzt bringt die Unterlagen."], "glossary_id": "{glossary}"},
    ),
    v1(
        "error_glossary_bad",
        "/v1/glossaries",
        {"name": "x", "source_language": "de", "target_language": "en", "entries": "Arzt"},
    ),
    # /v1 documents
    {
        "name": "document_upload",
        "method": "POST",
        "path": "/v1/documents",
        "files": {"file": ["brief.md", MARKDOWN, "text/markdown"]},
        "data": {"target_language": "en"},
        "save": {"document": "id"},
    },
    {
        "name": "document_status",
        "method": "GET",
        "path": "/v1/documents/{document}",
        "poll": {"key": "status", "until": ["done", "failed"]},
    },
    {"name": "document_result", "method": "GET", "path": "/v1/documents/{document}/result"},
    # DeepL API v2
    {
        "name": "deepl_translate",
        "method": "POST",
        "path": "/v2/translate",
        "headers": DEEPL_KEY,
        "json": {"text": ["Ein Hund spielt im Schnee.", DE], "target_lang": "EN-US"},
    },
    {
        "name": "deepl_translate_form",
        "method": "POST",
        "path": "/v2/translate",
        "headers": DEEPL_KEY,
        "data": {"text": DE2, "source_lang": "DE", "target_lang": "EN"},
    },
    {"name": "deepl_languages", "method": "GET", "path": "/v2/languages?type=target", "headers": DEEPL_KEY},
    {"name": "deepl_usage", "method": "GET", "path": "/v2/usage", "headers": DEEPL_KEY},
    {"name": "deepl_glossary_pairs", "method": "GET", "path": "/v2/glossary-language-pairs", "headers": DEEPL_KEY},
    {
        "name": "deepl_glossary_create",
        "method": "POST",
        "path": "/v2/glossaries",
        "headers": DEEPL_KEY,
        "json": {
            "name": "dogs",
            "source_lang": "de",
            "target_lang": "en",
            "entries": "Hund\thound",
            "entries_format": "tsv",
        },
        "save": {"deepl_glossary": "glossary_id"},
    },
    {
        "name": "deepl_translate_glossary",
        "method": "POST",
        "path": "/v2/translate",
        "headers": DEEPL_KEY,
        "json": {
            "text": ["Der Hund schläft."],
            "source_lang": "DE",
            "target_lang": "EN-US",
            "glossary_id": "{deepl_glossary}",
        },
    },
    {
        "name": "deepl_error_target",
        "method": "POST",
        "path": "/v2/translate",
        "headers": DEEPL_KEY,
        "json": {"text": [DE], "target_lang": "XX"},
    },
    {
        "name": "deepl_document_upload",
        "method": "POST",
        "path": "/v2/document",
        "headers": DEEPL_KEY,
        "files": {"file": ["brief.txt", "Ein Hund rennt im Park.\n", "text/plain"]},
        "data": {"target_lang": "EN-US"},
        "save": {"deepl_document": "document_id", "deepl_document_key": "document_key"},
    },
    {
        "name": "deepl_document_status",
        "method": "POST",
        "path": "/v2/document/{deepl_document}",
        "headers": DEEPL_KEY,
        "json": {"document_key": "{deepl_document_key}"},
        "poll": {"key": "status", "until": ["done", "error"]},
    },
    {
        "name": "deepl_document_result",
        "method": "POST",
        "path": "/v2/document/{deepl_document}/result",
        "headers": DEEPL_KEY,
        "json": {"document_key": "{deepl_document_key}"},
    },
    # LibreTranslate
    {"name": "libre_languages", "method": "GET", "path": "/languages"},
    {
        "name": "libre_translate",
        "method": "POST",
        "path": "/translate",
        "json": {"q": "Ein Hund spielt im Schnee.", "source": "auto", "target": "en"},
    },
    {
        "name": "libre_translate_alternatives",
        "method": "POST",
        "path": "/translate",
        "json": {"q": [DE, DE2], "source": "de", "target": "en", "alternatives": 2},
    },
    {
        "name": "libre_translate_form",
        "method": "POST",
        "path": "/translate",
        "data": {"q": "<p>Ein Hund</p>", "source": "de", "target": "en", "format": "html"},
    },
    {"name": "libre_detect", "method": "POST", "path": "/detect", "json": {"q": "Ein Hund spielt im Schnee."}},
    {
        "name": "libre_error_target",
        "method": "POST",
        "path": "/translate",
        "json": {"q": DE, "source": "de", "target": "xx"},
    },
    {
        "name": "libre_translate_file",
        "method": "POST",
        "path": "/translate_file",
        "files": {"file": ["brief.txt", "Ein Hund rennt im Park.\n", "text/plain"]},
        "data": {"source": "de", "target": "en"},
        "save": {"libre_file": "translatedFileUrl"},
    },
    {"name": "libre_download_file", "method": "GET", "path": "{libre_file}"},
    # Open Inference Protocol v2
    {"name": "v2_server", "method": "GET", "path": "/v2"},
    {"name": "v2_model", "method": "GET", "path": "/v2/models/de-en"},
    {"name": "v2_ready", "method": "GET", "path": "/v2/models/de-en/ready"},
    {
        "name": "v2_infer",
        "method": "POST",
        "path": "/v2/models/de-en/infer",
        "json": {
            "inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["Ein Hund spielt im Schnee."]}]
        },
    },
    {
        "name": "v2_infer_two",
        "method": "POST",
        "path": "/v2/models/zh-en/infer",
        "json": {
            "id": "r1",
            "inputs": [{"name": "TEXT", "shape": [2], "datatype": "BYTES", "data": [ZH, "我们走吧。"]}],
            "parameters": {"beam_size": 2},
        },
    },
    {
        "name": "v2_error_shape",
        "method": "POST",
        "path": "/v2/models/de-en/infer",
        "json": {"inputs": [{"name": "TEXT", "shape": [2], "datatype": "BYTES", "data": ["Ein Hund."]}]},
    },
    {"name": "v2_error_model", "method": "GET", "path": "/v2/models/fr-en"},
    {"name": "v2_index", "method": "POST", "path": "/v2/repository/index", "json": {}},
    {"name": "v2_live", "method": "GET", "path": "/v2/health/live"},
    {"name": "libre_health", "method": "GET", "path": "/health"},
    # deletions last: what was made above
    {"name": "glossary_delete", "method": "DELETE", "path": "/v1/glossaries/{glossary}"},
    {"name": "glossary_deleted", "method": "GET", "path": "/v1/glossaries/{glossary}"},
    {
        "name": "deepl_glossary_delete",
        "method": "DELETE",
        "path": "/v2/glossaries/{deepl_glossary}",
        "headers": DEEPL_KEY,
    },
    {"name": "document_delete", "method": "DELETE", "path": "/v1/documents/{document}"},
    {"name": "document_deleted", "method": "GET", "path": "/v1/documents/{document}"},
]
