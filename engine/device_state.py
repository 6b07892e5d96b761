"""Whole-batch search with I/O binding: the encoder's cross keys/values and the decoder's key/value cache stay on
the session's device (CUDA) for the whole decode; only the step's inputs that the search makes on the host (tokens,
positions, masks, a few bytes a row) go in and only its ranked candidates come out.

``DeviceRunner`` binds a bundle's encoder and decoder_step (interface 3) sessions; ``DeviceDecoderState.step`` is
the ``step(tokens, rows)`` of engine/search.py, so greedy and beam search run unchanged on top of it:
- the encoder's stacked cross keys/values (layers, sources, heads, src, d_head) are bound to the device and split
  into the step graph's per-layer inputs there, once per decode;
- each step's ``present_*`` outputs are bound to the device and become the next step's ``past_*`` inputs as they
  are (OrtValues, no copy); when beams trade places or sentences finish, the cache rows are reordered there by
  the committed gather graph (export/gather_graph.py), never through host memory;
- rows find their source through interface 3's ``query_rows`` / ``row_slots``, so the cross keys/values of a
  batch are never gathered again: a finished sentence's source stays (a hole no row reads);
- greedy asks the graph's TopK for 1 candidate (ties to the lower id, as numpy's argmax), beam search for 2k, so
  only (rows, k) candidates are copied to the host, never the (rows, vocab) log-probabilities.
The same code runs on the CPU provider (device "cpu"): tests check it gives the host path's translations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from core.graphs import MAX_TOP_K_KEY, VOCAB_IDS, has_vocab_ids, step_interface, step_present_names
from core.search import Hypothesis
from core.tokenizer import BOS_ID, EOS_ID, source_mask
from engine.search import TopCandidates, beam_search, greedy_search
from engine.step_inputs import ragged_inputs

GATHER_GRAPH = Path(__file__).with_name("gather.onnx")
DEVICE_TYPES = {"CUDAExecutionProvider": "cuda", "CPUExecutionProvider": "cpu"}


def device_type(providers: list[str]) -> str:
    """The onnxruntime device name ("cuda", "cpu") of a session's first provider."""
    if providers[0] not in DEVICE_TYPES:
        raise ValueError(f"no I/O binding device known for {providers[0]}")
    return DEVICE_TYPES[providers[0]]


def supports_device_search(step_session) -> bool:
    """Whether a decoder_step session takes interface 3's per-row inputs (what the device search feeds)."""
    return step_session is not None and step_interface(step_session.get_modelmeta().custom_metadata_map) >= 3


def wants_device_search(providers: list[str], step_session) -> bool:
    """The engine's default: search on the device where the sessions run on CUDA and the step graph allows it."""
    return providers[0] == "CUDAExecutionProvider" and supports_device_search(step_session)


@dataclass
class DeviceSources:
    """A batch's encoded sources on the device: per-layer cross keys and values, and the source mask."""

    cross_keys: list[ort.OrtValue]  # per layer (sources, heads, src, d_head)
    cross_values: list[ort.OrtValue]
    src_mask: ort.OrtValue  # (sources, src) bool
    count: int


class DeviceRunner:
    """A bundle's encoder and decoder_step sessions, run through I/O binding on the device of ``gather``'s session."""

    def __init__(self, encoder, step, gather, device_id: int = 0) -> None:
        if not supports_device_search(step):
            raise ValueError("search on the device needs a decoder_step graph of interface 3")
        self.encoder, self.step, self.gather_session = encoder, step, gather
        self.device, self.device_id = device_type(step.get_providers()), device_id
        self.n_layers = sum(1 for i in step.get_inputs() if i.name.startswith("past_keys_"))
        cache = next(i for i in step.get_inputs() if i.name == "past_keys_0").shape  # [rows, heads, past, d_head]
        self.heads, self.d_head = int(cache[1]), int(cache[3])
        self.max_top_k = int(step.get_modelmeta().custom_metadata_map.get(MAX_TOP_K_KEY, 1 << 30))
        self.presents = step_present_names(self.n_layers)
        # a graph with a vocabulary subset input (core/graphs.py VOCAB_IDS) runs here over the whole vocabulary
        self.full_vocabulary = {VOCAB_IDS: np.zeros(0, np.int64)} if has_vocab_ids(step) else {}

    def gather(self, value: ort.OrtValue, indices: np.ndarray) -> ort.OrtValue:
        """``value[indices]`` along the first axis, computed and kept on the device."""
        binding = self.gather_session.io_binding()
        binding.bind_ortvalue_input("x", value)
        binding.bind_cpu_input("indices", np.asarray(indices, dtype=np.int64))
        binding.bind_output("y", self.device, self.device_id)
        self.gather_session.run_with_iobinding(binding)
        return binding.get_outputs()[0]

    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> DeviceSources:
        """Run the encoder on ``src_ids`` (sources, src) with its cross keys/values left on the device."""
        binding = self.encoder.io_binding()
        binding.bind_cpu_input("src_ids", src_ids)
        binding.bind_output("cross_keys", self.device, self.device_id)
        binding.bind_output("cross_values", self.device, self.device_id)
        self.encoder.run_with_iobinding(binding)
        keys, values = binding.get_outputs()  # (layers, sources, heads, src, d_head) each
        layers = [np.array(i, dtype=np.int64) for i in range(self.n_layers)]
        return DeviceSources(
            [self.gather(keys, i) for i in layers],
            [self.gather(values, i) for i in layers],
            ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(src_mask), self.device, self.device_id),
            len(src_ids),
        )


class DeviceDecoderState:
    """The key/value cache of the live rows on the device; ``step`` reorders it and runs one decoder step.

    Row r reads source ``row_sources[r]`` (default: row r); ``top_k`` candidates per row come back to the host
    (1 for greedy, 2 * beam for beam search), or the full log-probabilities when the graph serves fewer.
    """

    def __init__(
        self, runner: DeviceRunner, sources: DeviceSources, row_sources: np.ndarray | None = None, top_k: int = 1
    ) -> None:
        self.runner, self.sources = runner, sources
        self.row_sources = np.arange(sources.count) if row_sources is None else np.asarray(row_sources)
        self.fetch_top = top_k <= runner.max_top_k
        self._top_k = np.array([top_k if self.fetch_top else 0], dtype=np.int64)
        self.past: list[ort.OrtValue] | None = None  # present_keys_0, present_values_0, ... of the last step
        self.past_len = 0

    def step(self, tokens: np.ndarray, rows: np.ndarray | None) -> np.ndarray | TopCandidates:
        if rows is not None and not np.array_equal(rows, np.arange(len(self.row_sources))):
            self.row_sources = self.row_sources[rows]
            if self.past is not None:
                self.past = [self.runner.gather(v, rows) for v in self.past]
        r, n = self.runner, len(tokens)
        binding = r.step.io_binding()
        feeds = ragged_inputs(np.full(n, self.past_len), self.row_sources, self.sources.count, self.past_len)
        feeds.update(tokens=np.ascontiguousarray(tokens, dtype=np.int64), top_k=self._top_k, **r.full_vocabulary)
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        binding.bind_ortvalue_input("src_mask", self.sources.src_mask)
        empty = np.zeros((n, r.heads, 0, r.d_head), dtype=np.float32) if self.past is None else None
        for i in range(r.n_layers):
            binding.bind_ortvalue_input(f"cross_keys_{i}", self.sources.cross_keys[i])
            binding.bind_ortvalue_input(f"cross_values_{i}", self.sources.cross_values[i])
            for j, kind in enumerate(("keys", "values")):
                if self.past is None:
                    binding.bind_cpu_input(f"past_{kind}_{i}", empty)
                else:
                    binding.bind_ortvalue_input(f"past_{kind}_{i}", self.past[2 * i + j])
        host = ["top_log_probs", "top_ids"] if self.fetch_top else ["log_probs"]
        for name in host:
            binding.bind_output(name, "cpu")
        for name in r.presents:
            binding.bind_output(name, r.device, r.device_id)
        r.step.run_with_iobinding(binding)
        outputs = binding.get_outputs()
        self.past, self.past_len = outputs[len(host) :], self.past_len + 1
        if not self.fetch_top:
            return outputs[0].numpy()  # (rows, vocab)
        return TopCandidates(outputs[0].numpy(), outputs[1].numpy())  # (rows, top_k) each, best first


def device_search(
    runner: DeviceRunner,
    src_ids: np.ndarray,
    limits: list[int],
    options,
    stats: dict[str, float],
    source_eos: bool = True,
) -> list[list[Hypothesis]]:
    """Engine._search on the device: ``src_ids`` (sources, src) padded, ``options`` a TranslateOptions; the n-best
    hypotheses of each source, and encode / decode seconds added to ``stats``."""
    started = time.perf_counter()
    sources = runner.encode(src_ids, source_mask(src_ids, source_eos))
    stats["encode"] = stats.get("encode", 0.0) + time.perf_counter() - started
    started = time.perf_counter()
    try:
        k = options.beam_size
        if k == 1:
            state = DeviceDecoderState(runner, sources, top_k=1)
            return [[h] for h in greedy_search(state.step, limits, BOS_ID, EOS_ID)]
        rows = np.repeat(np.arange(sources.count), k)
        state = DeviceDecoderState(runner, sources, row_sources=rows, top_k=2 * k)
        return beam_search(state.step, limits, BOS_ID, EOS_ID, k, options.penalty, options.num_hypotheses)
    finally:
        stats["decode"] = stats.get("decode", 0.0) + time.perf_counter() - started
