"""End-to-end effect of an in-place key/value cache: the bundle's step graph with its self-attention rewritten to
``GroupQueryAttention`` on preallocated buffers, against the engine as it is, same search code, same run.

    python -m bench.experiments.inplace_cache --data ../shared/data/multi30k [--bundle model_repository/de-en/2] \
        [--variant int8] [--repeats 3] [--limit 0] [--batch1-limit 200]

Issue 16's lever "I/O binding and preallocated OrtValues so the KV cache is written in place". Today every
decoder step's ``MultiHeadAttention`` copies each layer's whole cache into a new ``present`` tensor one column
wider, and the engine feeds it back next step (service/engine/engine.py ``_DecoderState``). Here:

- ``inplace_step_graph`` rewrites an interface-3 ``decoder_step.onnx`` (a copy beside the original, reading the
  same weights file): each self-attention ``MultiHeadAttention`` becomes ``GroupQueryAttention`` (kv heads =
  heads) with new inputs ``seqlens_k`` (rows,) and ``total_sequence_length``; its Q|K|V bias becomes an Add before
  the split (GroupQueryAttention has no bias input); ``self_mask`` goes (every row of a whole batch sits at one
  position; seqlens_k masks the rest of the buffer);
- ``InPlaceState`` is the engine's ``_DecoderState`` with the caches in (rows, heads, max length, d_head) numpy
  buffers bound through I/O binding as both past and present, so onnxruntime writes only the new column; a beam
  reorder or a finished row gathers the used columns into a second buffer set (np.take into a view), and the
  search itself is service/engine/search.py unchanged.

Both decode the same batches (the test set sorted by length in batches of 32; the first --batch1-limit sentences
one at a time), greedy and beam 4; CPU seconds of this process per setting, median of interleaved repeats; the
token ids of both must agree (printed). This is a measurement, not the engine: the exporter and the engine do not
build or read this graph.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from core.graphs import step_present_names

ROOT = Path(__file__).resolve().parent.parent
MS = "com.microsoft"


def inplace_step_graph(path: Path, out_dir: Path) -> Path:
    """A copy of the interface-3 step graph at ``path`` with in-place self-attention; returns its path (its
    external weights are copied into ``out_dir``)."""
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    nodes = []
    heads = None
    for node in graph.node:
        if node.op_type == "MultiHeadAttention" and len(node.input) >= 8 and node.input[6].startswith("past_keys_"):
            q, k, v, bias, _mask, _, past_k, past_v = node.input[:8]
            heads = next(a.i for a in node.attribute if a.name == "num_heads")
            split = producers[q]  # Split of the fused Q|K|V projection: add the bias before it
            biased = f"{split.input[0]}_biased"
            nodes.insert(
                nodes.index(split), helper.make_node("Add", [split.input[0], bias], [biased], name=f"{biased}_add")
            )
            split.input[0] = biased
            nodes.append(
                helper.make_node(
                    "GroupQueryAttention",
                    [q, k, v, past_k, past_v, "seqlens_k", "total_sequence_length"],
                    list(node.output),
                    name=node.name.replace("MultiHeadAttention", "GroupQueryAttention"),
                    domain=MS,
                    num_heads=heads,
                    kv_num_heads=heads,
                )
            )
        else:
            nodes.append(node)
    if heads is None:
        raise ValueError(f"{path}: no self-attention with a past cache to rewrite")
    mask_readers = {n.output[0] for n in nodes if list(n.input) == ["self_mask"]}
    nodes = [n for n in nodes if n.output[0] not in mask_readers]
    del graph.node[:]
    graph.node.extend(nodes)
    inputs = [i for i in graph.input if i.name != "self_mask"]
    inputs += [
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["rows"]),
        helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, []),
    ]
    del graph.input[:]
    graph.input.extend(inputs)
    for info in [*graph.input, *graph.output]:
        if info.name.startswith(("past_", "present_")):
            info.type.tensor_type.shape.dim[2].dim_param = "max_len"
    out_dir.mkdir(parents=True, exist_ok=True)
    for weights in path.parent.glob("*.weights"):  # a copy: onnxruntime refuses links out of the graph's folder
        if not (out_dir / weights.name).exists():
            shutil.copyfile(weights, out_dir / weights.name)
    out = out_dir / path.name.replace("decoder_step", "decoder_step_inplace")
    onnx.save(model, str(out))
    return out


def make_state_class():
    from service.engine.engine import _DecoderState
    from service.engine.search import TopCandidates

    class InPlaceState(_DecoderState):
        """_DecoderState with the self-attention cache written in place (see the module docstring)."""

        def __init__(self, session, keys, values, mask, row_sources, top_k: int, max_len: int, layers: int) -> None:
            super().__init__(session, keys, values, mask, lean=True, row_sources=row_sources, top_k=top_k)
            import onnxruntime as ort

            self._ort = ort
            rows = len(self.row_sources)
            _, heads, _, d_head = keys[0].shape
            shape = (rows, heads, max_len, d_head)
            self.sets = [[np.zeros(shape, np.float32) for _ in range(2 * layers)] for _ in range(2)]
            self.current, self.n_rows, self.layers = 0, rows, layers
            self._values: dict[tuple[int, int], list] = {}  # (set, rows) -> OrtValues of the buffers' first rows
            self._names = step_present_names(layers)
            self._fetch = ["top_log_probs", "top_ids"] if self.fetch_top else ["log_probs"]

        def _cross(self) -> dict:
            """OrtValues of the selected cross keys/values (made again only when the selection changes)."""
            if getattr(self, "_cross_for", None) is not self.cross_keys:
                self._cross_for = self.cross_keys
                self._cross_values = {}
                for i in range(self.layers):
                    for kind, arrays in (("keys", self.cross_keys), ("values", self.cross_values)):
                        array = np.ascontiguousarray(arrays[i])
                        self._cross_values[f"cross_{kind}_{i}"] = self._ort.OrtValue.ortvalue_from_numpy(array)
            return self._cross_values

        def _bound(self) -> list:
            key = (self.current, self.n_rows)
            if key not in self._values:
                self._values[key] = [
                    self._ort.OrtValue.ortvalue_from_numpy(b[: self.n_rows]) for b in self.sets[self.current]
                ]
            return self._values[key]

        def step(self, tokens: np.ndarray, rows: np.ndarray | None):
            if rows is not None and np.array_equal(rows, np.arange(len(self.row_sources))):
                rows = None
            if rows is not None:
                self.row_sources = self.row_sources[rows]
                self._select(self.row_sources)
                source, target, used = self.sets[self.current], self.sets[1 - self.current], self.length
                for a, b in zip(source, target, strict=True):
                    np.take(a[: self.n_rows, :, :used], rows, axis=0, out=b[: len(rows), :, :used], mode="clip")
                self.current, self.n_rows = 1 - self.current, len(rows)
            length, self.length = self.length, self.length + 1
            n = len(tokens)
            binding = self.session.io_binding()
            feeds = {
                "tokens": tokens,
                "src_mask": self.src_mask,
                "top_k": self._top_k_input,
                "positions": np.full((n, 1), length, np.int64),
                "query_rows": np.arange(n, dtype=np.int64).reshape(len(self.src_mask), -1),
                "row_slots": np.arange(n, dtype=np.int64),
                "seqlens_k": np.full(n, length, np.int32),
                "total_sequence_length": np.array(length + 1, np.int32),
            }
            for name, array in feeds.items():  # small: bind_cpu_input copies
                binding.bind_cpu_input(name, array)
            for name, value in self._cross().items():  # large: OrtValues on the arrays' own memory
                binding.bind_ortvalue_input(name, value)
            for name in self._fetch:  # first: get_outputs() lists outputs in the order they were bound
                binding.bind_output(name)
            for i, value in enumerate(self._bound()):
                kind = "keys" if i % 2 == 0 else "values"
                binding.bind_ortvalue_input(f"past_{kind}_{i // 2}", value)
                binding.bind_ortvalue_output(f"present_{kind}_{i // 2}", value)
            self.session.run_with_iobinding(binding)
            outputs = [v.numpy() for v in binding.get_outputs()[: len(self._fetch)]]
            if self.fetch_top:
                return TopCandidates(outputs[0], outputs[1])
            return outputs[0]

    return InPlaceState


def decode_inplace(engine, session, state_class, sources: list[list[int]], beam: int) -> list[list[int]]:
    from core.search import length_limits
    from core.tokenizer import BOS_ID, EOS_ID
    from service.engine.search import beam_search, greedy_search

    enc = engine.run_encoder(sources)
    limits = length_limits([len(s) for s in sources], engine.max_source_tokens)
    layers = int(engine.config["n_decoder_layers"])
    keys, values, mask = enc["cross_keys"], enc["cross_values"], enc["src_mask"]
    if beam == 1:
        state = state_class(session, keys, values, mask, None, 1, max(limits) + 1, layers)
        return [h.tokens for h in greedy_search(state.step, limits, BOS_ID, EOS_ID)]
    rows = np.repeat(np.arange(len(sources)), beam)
    state = state_class(session, keys, values, mask, rows, 2 * beam, max(limits) + 1, layers)
    return [n[0].tokens for n in beam_search(state.step, limits, BOS_ID, EOS_ID, beam, 0.6, 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.experiments.inplace_cache",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", required=True)
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--bundle", type=Path, default=ROOT / "model_repository" / "de-en" / "2")
    parser.add_argument("--variant", default="int8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--batch1-limit", type=int, default=200)
    args = parser.parse_args(argv)

    from bench.harness import cpu_model
    from core.bundle import load_bundle
    from service.engine import Engine, TranslateOptions
    from service.engine.runtime import create_session

    bundle = load_bundle(args.bundle)
    engine = Engine(bundle, args.variant, "cpu", intra_op_threads=1)
    graph = inplace_step_graph(bundle.graph(args.variant, "decoder_step"), Path(tempfile.mkdtemp(prefix="mt-inplace-")))
    session = create_session(graph, "cpu", intra_op_threads=1)
    state_class = make_state_class()
    lines = (Path(args.data) / f"{args.split}.{bundle.manifest['source_language']}").read_text().splitlines()
    ids = engine.source_ids(lines[: args.limit] if args.limit else lines)
    by_length = sorted(ids, key=len)
    settings = {
        "greedy/b32": (1, [by_length[i : i + 32] for i in range(0, len(by_length), 32)]),
        "beam4/b32": (4, [by_length[i : i + 32] for i in range(0, len(by_length), 32)]),
        "greedy/b1": (1, [[s] for s in ids[: args.batch1_limit]]),
        "beam4/b1": (4, [[s] for s in ids[: args.batch1_limit]]),
    }

    def run_engine(beam: int, batches) -> list[list[int]]:
        options = TranslateOptions(beam_size=beam)
        return [t.token_ids for b in batches for t in engine.translate_ids(b, options)]

    def run_inplace(beam: int, batches) -> list[list[int]]:
        return [t for b in batches for t in decode_inplace(engine, session, state_class, b, beam)]

    ways = {"engine (MultiHeadAttention, present copies)": run_engine, "in place (GroupQueryAttention)": run_inplace}
    times: dict[tuple[str, str], list[float]] = {}
    agree: dict[str, float] = {}
    for setting, (beam, batches) in settings.items():  # warm-up and agreement
        out = [way(beam, batches) for way in ways.values()]
        agree[setting] = sum(a == b for a, b in zip(*out, strict=True)) / len(out[0])
    for _ in range(args.repeats):
        for setting, (beam, batches) in settings.items():
            for name, way in ways.items():
                started = time.process_time()
                way(beam, batches)
                times.setdefault((setting, name), []).append(time.process_time() - started)
    names = list(ways)
    print(f"{args.bundle} {args.variant}, 1 thread, {cpu_model()}; CPU s, median of {args.repeats} interleaved repeats")
    print(f"| setting | {names[0]} | {names[1]} | ratio (engine / in place) | identical token ids |")
    print("|---|---:|---:|---:|---:|")
    for setting in settings:
        a, b = (statistics.median(times[(setting, n)]) for n in names)
        print(f"| {setting} | {a:.3f} | {b:.3f} | {a / b:.2f}x | {agree[setting]:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
