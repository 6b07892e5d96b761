"""Training-side augmentation (model/augment.py, model/prepare.py ``augment``): placeholders for the spans a pair
shares (numbers by value across conventions, URLs, e-mail addresses, times and dates as written), all-caps copies."""

from __future__ import annotations

import json
from pathlib import Path

from model.augment import PLACEHOLDERS, all_caps, number_value, with_placeholders
from model.cli import main as cli_main
from model.data import read_lines


def test_numbers_are_read_in_each_languages_convention() -> None:
    assert number_value("1.250.000", "de") == number_value("1,250,000", "en") == 1_250_000
    assert number_value("12,5", "de") == number_value("12.5", "en") == 12.5
    assert number_value("1.25", "de") is None  # not a German number: "." groups thousands there
    assert number_value("1 250 000", "de") == number_value("1\u202f250\u202f000", "en") == 1_250_000


def test_shared_spans_become_the_same_placeholder_on_both_sides() -> None:
    src = "Der Preis stieg um 12,5 % auf 1.250.000 Euro, siehe https://www.beispiel.de/hilfe."
    tgt = "The price rose 12.5% to 1,250,000 euros, see https://www.beispiel.de/hilfe."
    assert with_placeholders(src, tgt, "de", "en") == (
        "Der Preis stieg um <x1> % auf <x2> Euro, siehe <x3>.",
        "The price rose <x1>% to <x2> euros, see <x3>.",
    )
    # beside Chinese characters; the target's order may differ from the source's
    assert with_placeholders("员工有2,500人，成立于1999年。", "Founded in 1999, it has 2,500 staff.", "zh", "en") == (
        "员工有<x1>人，成立于<x2>年。",
        "Founded in <x2>, it has <x1> staff.",
    )
    assert with_placeholders("Um 16:45 Uhr.", "At 16:45.", "de", "en") == ("Um <x1> Uhr.", "At <x1>.")
    assert with_placeholders("Schreib an a.b@example.org!", "Write to a.b@example.org!", "de", "en") == (
        "Schreib an <x1>!", "Write to <x1>!",
    )  # fmt: skip


def test_no_placeholder_where_nothing_is_shared_or_a_value_differs() -> None:
    assert with_placeholders("Keine Zahlen.", "No numbers.", "de", "en") is None
    assert with_placeholders("Es kostet 12,5 Euro.", "It costs 125 euros.", "de", "en") is None
    assert with_placeholders("Version 3.2 ist da.", "Version 3.2 is out.", "de", "en") is None
    many = " ".join(str(n) for n in range(10, 20))
    out = with_placeholders(many, many, "en", "de")
    assert out is not None and all(p in out[0] for p in PLACEHOLDERS) and "15" in out[0]  # five at most


def test_all_caps_copies() -> None:
    assert all_caps("Betreten verboten!", "No entry!") == ("BETRETEN VERBOTEN!", "NO ENTRY!")
    assert all_caps("Hello", "你好") == ("HELLO", "你好")
    assert all_caps("你好", "Hello") is None and all_caps("OK", "OK") is None


def test_prepare_adds_augmented_copies_and_counts_them(tmp_path: Path) -> None:
    data = tmp_path / "data" / "news"
    data.mkdir(parents=True)
    de = [f"Im Jahr {1900 + i} lebten dort {i * 1000 + 1234:,} Menschen.".replace(",", ".") for i in range(60)]
    en = [f"In {1900 + i}, {i * 1000 + 1234:,} people lived there." for i in range(60)]
    (data / "t.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    (data / "t.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    recipe = {"name": "aug", "directions": ["de-en", "en-de"], "augment": {"placeholders": 0.5, "all_caps": 0.2},
              "corpora": [{"name": "news", "source": "de", "reader": "parallel", "path": "news"}]}  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    out = tmp_path / "out"
    assert cli_main(["prepare", "--recipe", str(tmp_path / "r.json"), "--data", str(tmp_path / "data"),
                     "--out", str(out)]) == 0  # fmt: skip
    counts = json.loads((out / "prepare.json").read_text())["corpora"]["news"]
    for direction in ("de-en", "en-de"):
        made = counts["augmented"][direction]
        assert 15 <= made["placeholders"] <= 45 and 3 <= made["all_caps"] <= 25, made
        assert counts["in_mix"][direction] == 60 + made["placeholders"] + made["all_caps"]
    src = read_lines(out / "train.src")
    assert any(line.startswith("<2en> Im Jahr <x1> lebten dort <x2> Menschen.") for line in src)
    assert any(line.startswith("<2de> IN ") for line in src)
