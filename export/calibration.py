"""Calibration feeds for static int8: what each graph is fed while the fp32 engine does real work.

Static quantization fixes every activation scale at export time, so a sentence's int8 answer no longer depends on
the other sentences of its batch (dynamic quantization takes the scale of the whole batch tensor). The scales come
from the inputs the graphs see while the fp32 bundle translates calibration sentences (greedy and beam search,
which is what decoder_step.onnx serves) and computes attention for some of them (decoder.onnx).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from core.graphs import STEP_GRAPHS

GRAPHS = ("encoder", "decoder_step", "decoder")


def calibrated_as(graph: str) -> str:
    """The recorded graph whose feeds calibrate ``graph``. Both step graphs (core/graphs.py STEP_GRAPHS) take the
    feeds recorded from the step graph the engine searches with: they have the same inputs, and in a whole batch
    (every row at one position, every cache column real) both layouts of the cache are the same tensors, so the two
    graphs are quantized with the same calibration, and their projections see the same activation ranges."""
    return "decoder_step" if graph in STEP_GRAPHS else graph


class _Recorder:
    """Wraps an onnxruntime session; keeps a copy of every feed dict passed to ``run``."""

    def __init__(self, session, store: list[dict[str, np.ndarray]]) -> None:
        self._session, self._store = session, store

    def run(self, output_names, feeds, *args, **kwargs):
        self._store.append({name: np.array(value, copy=True) for name, value in feeds.items()})
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


def record_feeds(
    bundle_dir: str | Path, sentences: Sequence[str], batch_size: int = 16, max_feeds: int = 160
) -> dict[str, list[dict[str, np.ndarray]]]:
    """Feeds of each fp32 graph while translating ``sentences``; at most ``max_feeds`` per graph, evenly spaced.

    The first half is translated greedily, the second with beam 4, and the attention of up to 24 sentences is
    computed (teacher forcing through decoder.onnx).
    """
    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions

    engine = Engine(load_bundle(bundle_dir), "fp32", "cpu")
    feeds: dict[str, list[dict[str, np.ndarray]]] = {graph: [] for graph in GRAPHS}
    engine.encoder = _Recorder(engine.encoder, feeds["encoder"])
    if engine.step_decoder is not None:
        engine.step_decoder = _Recorder(engine.step_decoder, feeds["decoder_step"])
    engine.decoder = _Recorder(engine.decoder, feeds["decoder"])
    half = len(sentences) // 2
    for beam, chunk in ((1, sentences[:half]), (4, sentences[half:])):
        for start in range(0, len(chunk), batch_size):
            engine.translate(chunk[start : start + batch_size], TranslateOptions(beam_size=beam))
    for src_ids in engine.source_ids(sentences[:24]):  # what attention computes: greedy translation, then the
        tgt_ids = engine.translate_ids([src_ids])[0].token_ids  # target teacher-forced through decoder.onnx
        engine.run_decoder_full(engine.run_encoder([src_ids]), [tgt_ids])  # (not the score it steps again)
    return {graph: items[:: max(1, len(items) // max_feeds)][:max_feeds] for graph, items in feeds.items() if items}


class FeedReader:
    """onnxruntime.quantization's CalibrationDataReader protocol over recorded feeds."""

    def __init__(self, items: list[dict[str, np.ndarray]]) -> None:
        self._items: Iterator[dict[str, np.ndarray]] = iter(items)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._items, None)
