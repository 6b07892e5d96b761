"""Which model answers a direction that several loaded models serve (MT_DIRECTION_MODELS): the named one while it
is loaded and serves it, else the default model, else the first by name; a setting that names a model or a
direction that is not served stops the start with a clear error."""

from __future__ import annotations

import pytest

from core.bundle import BundleError
from service.models.registry import (
    DIRECTION_MODELS_FILE,
    answering_models,
    check_direction_models,
    repository_direction_models,
)
from service.settings import Settings

SERVED = {
    "de-en": {"de-en"},
    "zh-en": {"zh-en"},
    "multi": {"de-en", "en-de", "zh-en", "en-zh", "de-zh", "zh-de"},
}


def test_without_a_choice_the_default_model_then_the_first_by_name_answers():
    pairs = answering_models(SERVED, "de-en", {})
    assert pairs["de", "en"] == "de-en"  # the default model
    assert pairs["zh", "en"] == "multi"  # "multi" < "zh-en"
    assert pairs["en", "de"] == "multi" and pairs["de", "zh"] == "multi"
    assert answering_models(SERVED, "zh-en", {})["zh", "en"] == "zh-en"


def test_the_named_model_answers_its_direction():
    pairs = answering_models(SERVED, "de-en", {"zh-en": "zh-en", "de-en": "multi"})
    assert pairs["zh", "en"] == "zh-en"
    assert pairs["de", "en"] == "multi"  # over the default model too
    assert pairs["en", "zh"] == "multi"


def test_a_named_model_that_is_not_loaded_leaves_the_usual_order():
    unloaded = {k: v for k, v in SERVED.items() if k != "zh-en"}  # taken out of service by the admin call
    assert answering_models(unloaded, "de-en", {"zh-en": "zh-en"})["zh", "en"] == "multi"


def test_a_setting_for_a_model_or_direction_not_served_is_refused():
    check_direction_models({"zh-en": "zh-en", "en-de": "multi"}, SERVED)
    with pytest.raises(BundleError, match="no model 'opus'"):
        check_direction_models({"en-de": "opus"}, SERVED)
    with pytest.raises(BundleError, match="model zh-en does not serve en-zh"):
        check_direction_models({"en-zh": "zh-en"}, SERVED)


def test_the_setting_reads_name_value_pairs(monkeypatch):
    monkeypatch.setenv("MT_DIRECTION_MODELS", "zh-en=zh-en, en-de=multi")
    assert Settings().repository.direction_models == {"zh-en": "zh-en", "en-de": "multi"}


def test_the_repository_file_is_read_and_a_bad_one_named(tmp_path):
    assert repository_direction_models(tmp_path) == {}  # no file: no choice
    (tmp_path / DIRECTION_MODELS_FILE).write_text("de-en=multi, zh-en=zh-en\n")
    assert repository_direction_models(tmp_path) == {"de-en": "multi", "zh-en": "zh-en"}
    (tmp_path / DIRECTION_MODELS_FILE).write_text("de-en\n")
    with pytest.raises(BundleError, match="direction-models: expected name=value"):
        repository_direction_models(tmp_path)


def test_a_repository_choice_for_a_model_not_loaded_leaves_the_usual_order():
    """MT_MODELS may load fewer models than the release chose among: its file's entries for them change nothing."""
    only_multi = {"multi": SERVED["multi"], "de-en": SERVED["de-en"]}
    pairs = answering_models(only_multi, "de-en", {"zh-en": "zh-en", "de-en": "multi"})
    assert pairs["zh", "en"] == "multi" and pairs["de", "en"] == "multi"
