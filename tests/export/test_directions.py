"""The manifest's ``directions`` (core/directions.py) and export's ``--directions`` (export/directions.py)."""

from __future__ import annotations

import pytest

from core.directions import Direction, DirectionError, directions_info, directions_of, normalization_language
from export.directions import directions_for

SPEC = "de-en,en-de,zh-en,en-zh,de-zh:pivot=en,zh-de:pivot=en"
OLD = {"source_language": "zh", "target_language": "en"}


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    """A SentencePiece model with the three target tags as user symbols, and one without them."""
    from model.tokenizer import train_tokenizer

    folder = tmp_path_factory.mktemp("tok")
    texts = ["der hund spielt im park", "the dog plays in the park", "狗在公园里玩"] * 50
    tagged = train_tokenizer(texts, folder / "tags.model", 300, user_symbols=["<2en>", "<2de>", "<2zh>"])
    plain = train_tokenizer(texts, folder / "plain.model", 300)
    return tagged, plain


def test_an_old_manifest_serves_its_one_pair_untagged():
    assert directions_of(OLD) == {"zh-en": Direction("zh", "en")}
    assert directions_info(OLD) == [{"source_language": "zh", "target_language": "en"}]
    assert normalization_language(OLD) == "zh"


def test_the_option_tags_each_direction_with_its_targets_piece(tokenizer_file):
    directions = directions_for(SPEC, tokenizer_file[0])
    assert list(directions) == SPEC.replace(":pivot=en", "").split(",")
    assert directions["en-zh"] == Direction("en", "zh", tag="<2zh>")
    assert directions["de-zh"] == Direction("de", "zh", pivot="en") and directions["de-zh"].legs() == ("de-en", "en-zh")
    manifest = {"source_language": "de", "target_language": "en"}
    manifest["directions"] = {name: d.entry() for name, d in directions.items()}
    assert manifest["directions"]["de-en"] == {"tag": "<2en>"} and manifest["directions"]["zh-de"] == {"pivot": "en"}
    assert directions_of(manifest) == directions  # read back as written
    assert normalization_language(manifest) == "zh"  # Chinese among the sources: Simplified script for every source


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("de-en,de-zh:pivot=en", "en-zh is not served directly"),
        ("de-zh:pivot=en,de-en,en-zh", "the first direction"),
        ("de-en,de-fr", "no tag piece for target 'fr'"),
        ("deen", "not 'source-target'"),
        ("de-en,en-de:via=fr", "the only option"),
    ],
)
def test_a_bad_option_says_why(tokenizer_file, spec, why):
    with pytest.raises(DirectionError, match=why):
        directions_for(spec, tokenizer_file[0])


def test_a_tokenizer_without_the_tags_is_refused(tokenizer_file):
    with pytest.raises(DirectionError, match="no piece '<2en>'"):
        directions_for("de-en", tokenizer_file[1])


def test_a_bad_manifest_field_says_why():
    with pytest.raises(DirectionError, match="'tag' or 'pivot' only"):
        directions_of({**OLD, "directions": {"de-en": {"tag": "<2en>", "via": "x"}}})
    with pytest.raises(DirectionError, match="a tag or a pivot, not both"):
        directions_of({**OLD, "directions": {"de-en": {"tag": "<2en>"}, "en-zh": {"tag": "<2zh>"},
                                              "de-zh": {"tag": "<2zh>", "pivot": "en"}}})  # fmt: skip


def test_one_way_between_german_and_chinese_direct_the_other_by_pivot(tokenizer_file):
    # scripts/release_multi.sh decides each way on its own measurements
    directions = directions_for("de-en,en-de,zh-en,en-zh,de-zh:pivot=en,zh-de", tokenizer_file[0])
    assert directions["de-zh"] == Direction("de", "zh", pivot="en")
    assert directions["zh-de"] == Direction("zh", "de", tag="<2de>")
