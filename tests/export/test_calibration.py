"""Calibration feeds for static int8 (export/calibration.py)."""

from __future__ import annotations

import pytest
from tiny_bundle import SAMPLE_SENTENCES

from core.bundle import load_bundle
from engine.runtime import create_session
from export.calibration import GRAPHS, read_sentences, record_feeds


def test_read_sentences_draws_a_seeded_sample_of_non_empty_lines(tmp_path):
    path = tmp_path / "train.de"
    path.write_text("a\n\n b \nc\nd\ne\n", encoding="utf-8")
    first = read_sentences(path, 3)
    assert len(first) == 3 and set(first) <= {"a", "b", "c", "d", "e"}
    assert read_sentences(path, 3) == first  # seeded
    assert sorted(read_sentences(path, 10)) == ["a", "b", "c", "d", "e"]


def test_read_sentences_refuses_an_empty_file(tmp_path):
    (tmp_path / "empty.de").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match="no sentences"):
        read_sentences(tmp_path / "empty.de", 5)


def test_feeds_of_every_graph_match_its_inputs_and_run(tiny_bundle_dir):
    """Recorded while the fp32 engine translates (greedy + beam) and computes attention; each feed runs as is."""
    feeds = record_feeds(tiny_bundle_dir, SAMPLE_SENTENCES * 4, batch_size=4, max_feeds=12)
    assert set(feeds) == set(GRAPHS)
    bundle = load_bundle(tiny_bundle_dir)
    for graph, items in feeds.items():
        assert 0 < len(items) <= 12
        session = create_session(bundle.graph("fp32", graph), "cpu")
        required = {i.name for i in session.get_inputs()}
        for item in items:
            assert set(item) == required, graph
        session.run(None, items[-1])
    steps = feeds["decoder_step"]
    assert max(int(f["tokens"].shape[0]) for f in steps) > 4  # beam 4 rows (more than a batch of 4) recorded too
