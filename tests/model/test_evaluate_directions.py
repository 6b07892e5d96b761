"""Scoring a multilingual model by direction (model/evaluate.py): the target tag on each source, two legs through a
pivot language, sacreBLEU's tokenizer chosen by the target language, and translations in the wrong language
counted."""

from __future__ import annotations

import model.evaluate as evaluate_module
from model.evaluate import evaluate


def _fake_translate(calls: list[list[str]]):
    def translate(model, tokenizer, texts, beam_size=1, alpha=0.6, **_):
        calls.append(list(texts))
        return [f"out{len(calls)}:{t.split(' ', 1)[1]}" for t in texts]

    return translate


def test_direct_direction_tags_the_source_once(monkeypatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(evaluate_module, "translate", _fake_translate(calls))
    result, hyps = evaluate(None, None, ["Guten Tag"], ["你好"], direction="de-zh")
    assert calls == [["<2zh> Guten Tag"]] and hyps == ["out1:Guten Tag"]
    assert result["legs"] == ["de-zh"] and "tok:zh" in result["signature"]


def test_pivot_translates_into_the_pivot_then_from_it(monkeypatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(evaluate_module, "translate", _fake_translate(calls))
    result, hyps = evaluate(None, None, ["Guten Tag", "Danke"], ["你好", "谢谢"], direction="de-zh", pivot="en")
    assert calls == [["<2en> Guten Tag", "<2en> Danke"], ["<2zh> out1:Guten Tag", "<2zh> out1:Danke"]]
    assert hyps == ["out2:out1:Guten Tag", "out2:out1:Danke"] and result["legs"] == ["de-en", "en-zh"]


def test_a_pivot_that_is_an_end_of_the_direction_is_direct(monkeypatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(evaluate_module, "translate", _fake_translate(calls))
    result, _ = evaluate(None, None, ["Hallo Welt"], ["Hello world"], direction="de-en", pivot="en")
    assert calls == [["<2en> Hallo Welt"]] and result["legs"] == ["de-en"] and "tok:13a" in result["signature"]


def test_translations_in_another_language_than_the_target_are_counted(monkeypatch) -> None:
    answers = {"<2zh> Ein Mann fährt Rad.": "一个男人骑自行车。", "<2zh> Ein Hund läuft.": "A dog is running."}
    answers["Ein Hund läuft."] = "A dog is running."
    monkeypatch.setattr(
        evaluate_module, "translate", lambda model, tokenizer, texts, *a, **k: [answers[t] for t in texts]
    )
    result, _ = evaluate(
        None, None, ["Ein Mann fährt Rad.", "Ein Hund läuft."], ["男人骑车。", "狗跑。"], direction="de-zh"
    )
    assert result["off_target"] == 1
    untagged, _ = evaluate(None, None, ["Ein Hund läuft."], ["狗跑。"])  # no direction, no target: not judged
    assert "off_target" not in untagged
