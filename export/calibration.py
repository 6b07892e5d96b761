"""Calibration feeds for static int8: what each graph is fed while the fp32 engine does real work.

Static quantization fixes every activation scale at export time, so a sentence's int8 answer no longer depends on
the other sentences of its batch (dynamic quantization takes the scale of the whole batch tensor). The scales come
from the inputs the graphs see while the fp32 bundle translates calibration sentences (greedy and beam search,
which is what decoder_step.onnx serves) and computes attention for some of them (decoder.onnx).

Memory: a step's feed holds its rows' whole cache, so the feeds are never kept. The translations run twice
(``select_feeds``): the first counts each graph's feeds, the second hands the chosen ones (at most ``max_feeds`` per
graph, evenly spaced) to onnxruntime's MinMax calibrater as they arrive (``calibrate``), which reduces each to the
min/max of every MatMul/Gemm tensor and merges them. What is held is one feed and the ranges, whatever the number of
sentences, their lengths or the vocabulary; the int8 graphs are byte for byte those of ``quantize_static`` given the
same feeds at once (tests/export/test_calibration.py).
"""

from __future__ import annotations

import gc
import logging
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from core.graphs import STEP_GRAPHS

GRAPHS = ("encoder", "decoder_step", "decoder")
QUANTIZED_OPS = ["MatMul", "Gemm"]  # the op types int8 quantizes (export/quantize.py), whose tensors calibrate


def calibrated_as(graph: str) -> str:
    """The recorded graph whose feeds calibrate ``graph``. Both step graphs (core/graphs.py STEP_GRAPHS) take the
    feeds recorded from the step graph the engine searches with: they have the same inputs, and in a whole batch
    (every row at one position, every cache column real) both layouts of the cache are the same tensors, so the two
    graphs are quantized with the same calibration, and their projections see the same activation ranges."""
    return "decoder_step" if graph in STEP_GRAPHS else graph


class _Recorder:
    """Wraps an onnxruntime session; hands each feed dict passed to ``run`` to ``see(feed)`` before running it."""

    def __init__(self, session, see: Callable[[dict[str, np.ndarray]], None]) -> None:
        self._session, self._see = session, see

    def run(self, output_names, feeds, *args, **kwargs):
        self._see(feeds)
        return self._session.run(output_names, feeds, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._session, name)


def read_sentences(path: str | Path, count: int, seed: int = 0) -> list[str]:
    """``count`` non-empty lines drawn at random (seeded) from a text file, one sentence per line."""
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path} has no sentences to calibrate int8 with")
    random.Random(seed).shuffle(lines)
    return lines[:count]


def translate_with(
    bundle_dir: str | Path,
    sentences: Sequence[str],
    see: Callable[[str, dict[str, np.ndarray]], None],
    batch_size: int = 16,
) -> None:
    """Translates ``sentences`` with the fp32 graphs, calling ``see(graph, feed)`` with every feed of every graph.

    The first half is translated greedily, the second with beam 4, and the attention of up to 24 sentences is
    computed (teacher forcing through decoder.onnx). Deterministic: a second call sees the same feeds in order.
    """
    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions

    engine = Engine(load_bundle(bundle_dir), "fp32", "cpu")
    engine.encoder = _Recorder(engine.encoder, lambda feed: see("encoder", feed))
    if engine.step_decoder is not None:
        engine.step_decoder = _Recorder(engine.step_decoder, lambda feed: see("decoder_step", feed))
    engine.decoder = _Recorder(engine.decoder, lambda feed: see("decoder", feed))
    half = len(sentences) // 2
    for beam, chunk in ((1, sentences[:half]), (4, sentences[half:])):
        for start in range(0, len(chunk), batch_size):
            engine.translate(chunk[start : start + batch_size], TranslateOptions(beam_size=beam))
    for src_ids in engine.source_ids(sentences[:24]):  # what attention computes: greedy translation, then the
        tgt_ids = engine.translate_ids([src_ids])[0].token_ids  # target teacher-forced through decoder.onnx
        engine.run_decoder_full(engine.run_encoder([src_ids]), [tgt_ids])  # (not the score it steps again)
    del engine
    gc.collect()  # the engine's sessions go now, not at some later collection: the next pass loads its own


def spaced(count: int, max_feeds: int) -> set[int]:
    """Indices of the feeds that calibrate, of ``count`` seen: at most ``max_feeds``, evenly spaced from the first."""
    return set(range(count)[:: max(1, count // max_feeds)][:max_feeds])


def select_feeds(
    bundle_dir: str | Path,
    sentences: Sequence[str],
    use: Callable[[str, dict[str, np.ndarray]], None],
    batch_size: int = 16,
    max_feeds: int = 160,
) -> dict[str, int]:
    """Calls ``use(graph, feed)`` with at most ``max_feeds`` feeds per graph, evenly spaced over all the feeds the
    graph sees while translating ``sentences`` (``translate_with``); returns how many each graph saw.

    Two passes over the same translations: the first counts each graph's feeds, the second hands on the chosen
    ones as they arrive, so no feed outlives its step. A step's feed holds the whole cache of its rows (a beam of 4
    over 16 sentences, 512 tokens deep, is ~800 MB at OPUS-MT's shape): keeping every feed until the count is known
    grew an OPUS-shape import to 24 GB.
    """
    counts: dict[str, int] = {}
    translate_with(
        bundle_dir, sentences, lambda graph, feed: counts.__setitem__(graph, counts.get(graph, 0) + 1), batch_size
    )
    chosen = {graph: spaced(count, max_feeds) for graph, count in counts.items()}
    seen: dict[str, int] = {}

    def see(graph: str, feed: dict[str, np.ndarray]) -> None:
        index = seen[graph] = seen.get(graph, -1) + 1
        if index in chosen.get(graph, ()):
            use(graph, feed)

    translate_with(bundle_dir, sentences, see, batch_size)
    again = {graph: n + 1 for graph, n in seen.items()}
    if again != counts:  # not seen here (the fp32 engine repeats itself on one machine); the ranges stay usable
        logging.getLogger(__name__).warning("calibration feeds changed between passes: %s, then %s", counts, again)
    return counts


def record_feeds(
    bundle_dir: str | Path, sentences: Sequence[str], batch_size: int = 16, max_feeds: int = 160
) -> dict[str, list[dict[str, np.ndarray]]]:
    """Copies of the feeds ``select_feeds`` chooses, per graph (for inspection and tests: a step's feed can be
    large; ``calibrate`` reduces them as they arrive instead)."""
    feeds: dict[str, list[dict[str, np.ndarray]]] = {}

    def keep(graph: str, feed: dict[str, np.ndarray]) -> None:
        feeds.setdefault(graph, []).append({name: np.array(value, copy=True) for name, value in feed.items()})

    select_feeds(bundle_dir, sentences, keep, batch_size, max_feeds)
    return feeds


class _OneFeed:
    """onnxruntime.quantization's CalibrationDataReader protocol over one feed."""

    def __init__(self, feed: dict[str, np.ndarray]) -> None:
        self._feed: dict[str, np.ndarray] | None = feed

    def get_next(self) -> dict[str, np.ndarray] | None:
        feed, self._feed = self._feed, None
        return feed


def calibrate(
    bundle_dir: str | Path,
    sentences: Sequence[str],
    graphs: dict[str, Path],
    work_dir: str | Path,
    batch_size: int = 16,
    max_feeds: int = 160,
) -> dict[str, Path]:
    """The min/max activation ranges of each fp32 graph in ``graphs`` (name: path) over the feeds ``select_feeds``
    chooses from its recorded graph (``calibrated_as``), written as onnxruntime calibration caches
    (``<work_dir>/<graph>.json``, which ``quantize_int8_static`` reads); returns their paths.

    Each chosen feed is reduced as it arrives by onnxruntime's MinMax calibrater (the graph with ReduceMin/ReduceMax
    outputs on every MatMul/Gemm tensor; the ranges merged, the rest dropped), so memory holds one feed and the
    ranges, whatever the number of sentences, their lengths or the vocabulary. The ranges equal those
    onnxruntime's ``quantize_static`` computes from the same feeds given all at once.
    """
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data

    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    calibrators: dict = {}

    def calibrator(graph: str):
        if graph not in calibrators:  # made when its first feed comes (the second pass), one graph after another
            made = create_calibrator(
                Path(graphs[graph]),
                QUANTIZED_OPS,
                augmented_model_path=str(work / f"{graph}.augmented.onnx"),
                calibrate_method=CalibrationMethod.MinMax,
                extra_options={"moving_average": False},
            )
            made.model = None  # the augmented graph with its weights, no longer read once its session runs
            (work / f"{graph}.augmented.onnx").unlink()
            calibrators[graph] = made
        return calibrators[graph]

    def reduce(recorded: str, feed: dict[str, np.ndarray]) -> None:
        for graph in graphs:
            if calibrated_as(graph) == recorded:  # merges this feed's min/max into the ranges, keeps no output
                calibrator(graph).collect_data(_OneFeed(feed))

    select_feeds(bundle_dir, sentences, reduce, batch_size, max_feeds)
    caches = {}
    for graph in graphs:
        if graph not in calibrators:
            raise ValueError(f"no calibration feeds for {graph}")
        save_tensors_data(calibrators[graph].compute_data(), caches.setdefault(graph, work / f"{graph}.json"))
    calibrators.clear()
    gc.collect()
    return caches


class FeedReader:
    """onnxruntime.quantization's CalibrationDataReader protocol over feeds in a list (small graphs and tests)."""

    def __init__(self, items: list[dict[str, np.ndarray]]) -> None:
        self._items: Iterator[dict[str, np.ndarray]] = iter(items)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._items, None)
