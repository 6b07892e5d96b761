"""Calibration feeds for static int8 (export/calibration.py)."""

from __future__ import annotations

import tracemalloc

import pytest
from tiny_bundle import SAMPLE_SENTENCES

from core.bundle import load_bundle
from engine.runtime import create_session
from export.calibration import GRAPHS, calibrate, calibrated_as, read_sentences, record_feeds, select_feeds
from export.onnx_export import export_graphs
from export.quantize import quantize_int8_static
from model.checkpoint import load_release


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


@pytest.fixture(scope="module")
def fp32_graphs(tiny_model_dir, tmp_path_factory):
    """The tiny model's fp32 graphs as the export quantizes them (one file each, before packing)."""
    model, _ = load_release(tiny_model_dir / "release")
    return export_graphs(model, tmp_path_factory.mktemp("fp32"), decoder_step=True)


def test_ranges_reduced_as_feeds_arrive_quantize_as_the_feeds_given_at_once(tiny_bundle_dir, fp32_graphs, tmp_path):
    """calibrate (min/max merged feed by feed, no feed kept) makes the same int8 graphs, byte for byte, as
    onnxruntime's quantize_static given the same chosen feeds all at once (what the export did before)."""
    sentences = SAMPLE_SENTENCES * 2
    feeds = record_feeds(tiny_bundle_dir, sentences, batch_size=4, max_feeds=12)
    ranges = calibrate(tiny_bundle_dir, sentences, fp32_graphs, tmp_path / "work", batch_size=4, max_feeds=12)
    assert set(ranges) == set(fp32_graphs)
    for graph, path in fp32_graphs.items():
        at_once = quantize_int8_static(path, tmp_path / "at_once" / f"{graph}.onnx", feeds[calibrated_as(graph)])
        reduced = quantize_int8_static(path, tmp_path / "reduced" / f"{graph}.onnx", ranges[graph])
        assert reduced.read_bytes() == at_once.read_bytes(), graph


def test_calibration_memory_does_not_grow_with_the_steps(tiny_bundle_dir, fp32_graphs, tmp_path):
    """Four times the sentences (four times the steps, the same batches), every feed reduced, leave the peak of
    Python-held memory (numpy feeds and outputs included) where it was: a feed lives only for its step. Keeping the
    feeds instead (record_feeds, as the export did) grows with them, which the same measure sees."""

    def peak(run) -> int:
        tracemalloc.start()
        try:
            run()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    def calibrated(copies: int) -> int:
        work = tmp_path / f"work{copies}"
        return peak(lambda: calibrate(tiny_bundle_dir, SAMPLE_SENTENCES * copies, fp32_graphs, work, 4, 10**6))

    def kept(copies: int) -> int:
        return peak(lambda: record_feeds(tiny_bundle_dir, SAMPLE_SENTENCES * copies, 4, 10**6))

    calibrated(1)  # imports and first-call caches out of the way
    few, many = calibrated(2), calibrated(8)
    assert many < few * 1.2, (few, many)
    assert kept(8) > kept(2) * 1.5  # the measure sees kept feeds


def test_select_feeds_hands_on_at_most_max_feeds_evenly_spaced(tiny_bundle_dir):
    chosen: dict[str, int] = {}
    counts = select_feeds(
        tiny_bundle_dir,
        SAMPLE_SENTENCES * 4,
        lambda graph, feed: chosen.__setitem__(graph, chosen.get(graph, 0) + 1),
        batch_size=4,
        max_feeds=7,
    )
    assert counts["decoder_step"] > 7
    assert chosen == {graph: min(7, count) for graph, count in counts.items()}
