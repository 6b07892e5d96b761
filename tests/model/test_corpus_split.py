"""Deterministic Tatoeba split by a hash of the English side."""

from __future__ import annotations

import json

from model.corpus_split import read_tatoeba, split_pairs, write_splits


def _corpus(tmp_path, n=3000):
    lines = ["\ufeffHi.\t嗨。\tCC-BY 2.0 (France) Attribution: tatoeba.org #1 (a) & #2 (b)"]
    for i in range(n):
        english = f"Sentence number {i // 2}."  # every English sentence has two translations
        lines.append(f"{english}\t句子{i}。\tCC-BY 2.0 (France) Attribution: tatoeba.org #{i}")
    lines.append("no translation\t\tattribution")
    path = tmp_path / "cmn.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_split_is_deterministic_sized_and_never_shares_an_english_sentence(tmp_path):
    pairs = read_tatoeba(_corpus(tmp_path))
    assert pairs[0].english == "Hi." and pairs[0].other == "嗨。"  # byte-order mark stripped
    assert all(p.other for p in pairs)  # the line without a translation is skipped
    splits = split_pairs(pairs, held_out=300)
    assert split_pairs(read_tatoeba(_corpus(tmp_path)), held_out=300) == splits
    assert sum(map(len, splits.values())) == len(pairs)
    for name in ("val", "test"):
        assert 200 <= len(splits[name]) <= 400, (name, len(splits[name]))
    english = {name: {p.english for p in split} for name, split in splits.items()}
    assert not english["train"] & english["val"] and not english["train"] & english["test"]
    assert not english["val"] & english["test"]


def test_written_files_are_line_parallel_with_attribution(tmp_path):
    splits = split_pairs(read_tatoeba(_corpus(tmp_path, 200)), held_out=20)
    counts = write_splits(splits, tmp_path / "out", "zh")
    for name, count in counts.items():
        for suffix in ("en", "zh", "attribution"):
            assert len((tmp_path / "out" / f"{name}.{suffix}").read_text("utf-8").splitlines()) == count
    assert json.loads((tmp_path / "out" / "split.json").read_text())["counts"] == counts
