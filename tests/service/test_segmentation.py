"""Sentence splitting and reassembly (service/serving/segmentation.py), without a model."""

from __future__ import annotations

import numpy as np
import pytest

from engine.translation import Translation
from service.serving.segmentation import join, merge, split_text


def _marked(text: str, language: str = "de", target: str = "en") -> str:
    layout = split_text(text, language)
    return join(layout, [f"<{s}>" for s in layout.sentences], target)


def test_one_sentence_is_the_text_itself():
    layout = split_text("Ein Mann fährt Fahrrad.", "de")
    assert layout.sentences == ("Ein Mann fährt Fahrrad.",)
    assert layout.parts == (("sentence", 0),)


def test_paragraph_is_split_into_sentences():
    layout = split_text("Ein Mann läuft. Eine Frau sitzt! Wo ist der Hund?", "de")
    assert layout.sentences == ("Ein Mann läuft.", "Eine Frau sitzt!", "Wo ist der Hund?")
    assert _marked("Ein Mann läuft. Eine Frau sitzt!") == "<Ein Mann läuft.> <Eine Frau sitzt!>"


@pytest.mark.parametrize(
    "text",
    [
        "eins\nzwei\ndrei",
        "eins\n\nzwei\n",
        "  führende und folgende Leerzeichen  ",
        "\n\nZeile mit Rand.  \r\n\tEingerückt. Zwei Sätze.\n",
        "a\n \n\nb",
        "",
        "   ",
        "\n",
    ],
)
def test_lines_blank_lines_and_whitespace_are_kept(text):
    layout = split_text(text, "de")
    out = join(layout, [f"<{s}>" for s in layout.sentences], "en")
    assert len(out.splitlines(keepends=True)) == len(text.splitlines(keepends=True))  # N lines in, N lines out
    assert out.replace("<", "").replace(">", "") == text  # everything but the sentences is verbatim


def test_list_of_twenty_lines_gives_twenty_lines():
    text = "\n".join(f"Punkt {i}: ein Hund." for i in range(20))
    layout = split_text(text, "de")
    assert len(join(layout, ["x"] * len(layout.sentences), "en").split("\n")) == 20


def test_gaps_follow_the_target_script():
    assert _marked("一。二！三", "zh", "en") == "<一。> <二！> <三>"  # Chinese has no spaces; English needs them
    assert _marked("Eins. Zwei.", "de", "zh") == "<Eins.><Zwei.>"


def test_no_split_keeps_the_old_behaviour():
    text = "  Zwei Sätze. Hier.\nUnd eine Zeile.  "
    layout = split_text(text, "de", split=False)
    assert layout.sentences == (text,)


def test_german_abbreviations_do_not_split():
    assert split_text("Das ist z. B. ein Test. Hier Dr. Müller.", "de").sentences == (
        "Das ist z. B. ein Test.",
        "Hier Dr. Müller.",
    )


def _translation(text, score, tokens, sources, hypotheses=(), attention=None):
    return Translation(text, score, list(tokens), list(sources), list(hypotheses), attention)


def test_merge_joins_scores_tokens_hypotheses_and_attention():
    layout = split_text("Eins. Zwei.", "de")
    a = _translation(
        "One.",
        -1.0,
        [10, 11],
        [20, 2],
        [("One.", -1.0, [10, 11]), ("A one.", -2.0, [12])],
        np.ones((2, 1, 2, 2), dtype=np.float32),
    )
    b = _translation("Two.", -0.5, [13], [21, 22, 2], [("Two.", -0.5, [13])], np.full((2, 1, 1, 3), 2, np.float32))
    merged = merge(layout, [a, b], "en", num_hypotheses=2)
    assert merged.text == "One. Two."
    assert merged.score == -1.5
    assert merged.token_ids == [10, 11, 13] and merged.source_ids == [20, 2, 21, 22, 2]
    assert [h[0] for h in merged.hypotheses] == ["One. Two.", "A one. Two."]
    assert merged.attention.shape == (2, 1, 3, 5)
    assert merged.attention[0, 0, 2, :2].sum() == 0 and merged.attention[0, 0, 2, 2:].tolist() == [2, 2, 2]


def test_merge_of_a_whitespace_text():
    merged = merge(split_text("  \n", "de"), [], "en")
    assert merged.text == "  \n" and merged.score == 0.0 and merged.token_ids == []
