"""Bundle format 2: every tensor of a bundle stored once, in one weights file per variant, read by offset.

``pack_bundle`` turns the self-contained graphs of a format-1 bundle (``<variant>/<graph>.onnx``, each holding its
own copy of every weight) into one folder ``graphs/``::

    graphs/fp32.encoder.onnx  fp32.decoder.onnx  fp32.decoder_step.onnx   graph protos, no large tensor inside
             fp32.decoder_step_batch.onnx  (the whole-batch step graph: the same weights, core/graphs.py)
    graphs/int8.encoder.onnx  ...                                          (ONNX external data: location, offset,
    graphs/fp16.encoder.onnx  ...                                           length of a region of a weights file)
    graphs/fp32.weights       every float32 tensor of the model, once; read by all three variants
    graphs/int8.weights       the int8 weights (and whatever else int8 has that fp32.weights lacks)
    graphs/fp16.weights       only the fp16 tensors that cannot be derived from fp32.weights (none for de-en)
    graphs/float16.weights    float16 storage only (export --float16-storage): the float32 tensors, as float16

Variants are packed in order (fp32 first). A tensor of 1 KiB or more is, in this order of preference:
- a reference to a region already stored with the same bytes and element type (any shape, any weights file):
  the decoder, both step graphs and encoder share the embedding and the decoder layers; the int8 graphs read the
  float tensors they need (embedding, LayerNorm, biases, the float output projection) from fp32.weights;
- an exact function of stored tensors, computed by an operator that onnxruntime's constant folding (basic graph
  optimizations, every execution provider) evaluates once at session start, so the optimized graph holds the
  same constant as before: ``Transpose`` (decoder_step's output projection is the embedding transposed),
  ``Concat`` (its fused Q|K|V projection, float and int8, is the three projections side by side), ``Cast`` to
  float16 (the fp16 weights) followed, where the fp16 converter clamped a few tiny values (|w| < 1e-7 becomes
  1e-7), by a ``ScatterND`` that writes those elements back; a float16 tensor whose float32 twin is itself
  derived (fp16 decoder_step's transposed output projection and fused Q|K|V) is a Transpose or Concat of such
  Casts. Each derivation is checked at export: the Cast
  with onnxruntime's own kernel, so the derived tensor equals the converted graph's tensor bit for bit;
- else stored, in the variant's own weights file.
int8 weights are never derived from the float ones (a QuantizeLinear's rounding may differ between
onnxruntime builds and CPUs); Cast to float16 rounds to nearest even on every IEEE implementation.

onnxruntime and onnx refuse an external-data location outside the model's folder (``../fp32.weights`` fails in
onnxruntime 1.32 with "External data path ... escapes model directory", microsoft/onnxruntime#26776, and in
onnx.load / onnx.checker), so a variant's graphs and every weights file they read sit side by side in ``graphs/``.
Offsets of tensors of 64 KiB or more are multiples of 4096, the page size, so onnxruntime can memory-map them on
the CPU.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from core.graphs import STEP_GRAPHS
from export.float16_storage import HALF_FILE, OTHER, exact_half, layout

GRAPHS_DIR = "graphs"
GRAPH_KEYS = ("encoder", "decoder", *STEP_GRAPHS)
INLINE_BELOW = 1024  # bytes: smaller tensors (shapes, scalars, activation scales) stay inside their graph
PAGE = 4096
PAGE_ALIGNED_FROM = 64 * 1024  # tensors of this size or more start on a page boundary (mmap); others on 64 bytes
DEBUG_METADATA = ("pkg.torch.onnx.", "namespace")  # node annotations of torch's exporter, not read by any runtime
MAX_PATCHED = 0.01  # a Cast is patched with ScatterND for at most this fraction of the elements; else stored
PACKED = ".pack"  # name suffix of the nodes that derive a tensor from stored ones


def weights_file(variant: str) -> str:
    return f"{variant}.weights"


@dataclass(frozen=True)
class Region:
    file: str  # name inside graphs/
    offset: int
    length: int


Key = tuple[int, bytes]  # (ONNX element type, sha256 of the bytes): a stored tensor


def _key(data_type: int, data: bytes) -> Key:
    return data_type, hashlib.sha256(data).digest()


def _bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).tobytes()


def _cast_fingerprint(half: np.ndarray) -> bytes:
    """Content hash of a float16 tensor with its tiny entries zeroed: the fp16 converter moves |w| < 1e-7 to 1e-7."""
    flat = half.reshape(-1).astype(np.float32)
    return hashlib.sha256(np.where(np.abs(flat) < 1e-6, 0, flat).astype(np.float16).tobytes()).digest()


def ort_cast_float16(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """float32 -> float16 by onnxruntime's Cast kernel (the one its constant folding runs)."""
    import onnxruntime as ort

    if not arrays:
        return []
    names = [f"x{i}" for i in range(len(arrays))]
    graph = helper.make_graph(
        [helper.make_node("Cast", [n], [f"{n}.half"], to=TensorProto.FLOAT16) for n in names],
        "cast",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in zip(names, arrays, strict=True)],
        [
            helper.make_tensor_value_info(f"{n}.half", TensorProto.FLOAT16, a.shape)
            for n, a in zip(names, arrays, strict=True)
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, arrays, strict=True)))


class WeightStore:
    """The tensors of the weights files, indexed by element type and content; offsets are given by ``write``."""

    def __init__(self) -> None:
        self._blobs: dict[str, dict[Key, bytes]] = {}  # file -> key -> bytes, in order of arrival
        self._regions: dict[Key, Region] = {}
        self._floats: list[tuple[np.ndarray, Key]] = []  # float32 tensors stored: Cast sources
        self._cast_index: dict[bytes, list[tuple[np.ndarray, Key]]] | None = None
        self._where: dict[Key, str] = {}
        self._named: list[tuple[str, tuple[int, ...], Key]] = []  # HALF_FILE's tensors (a safetensors file), in order

    def find(self, data_type: int, array: np.ndarray) -> Key | None:
        key = _key(data_type, _bytes(array))
        return key if key in self._where else None

    def add(self, file: str, data_type: int, array: np.ndarray, name: str | None = None) -> Key:
        """Store ``array`` in ``file`` unless equal bytes are stored; ``name``: a parameter of the model, which
        HALF_FILE lists under its own name even when another one has the same values."""
        data = _bytes(array)
        key = _key(data_type, data)
        if file == HALF_FILE and (name is not None or key not in self._where):
            taken = {n for n, _, _ in self._named}
            label, n = name or OTHER + "tensor", 0
            while label in taken:
                n += 1
                label = f"{name or OTHER + 'tensor'}.{n}"
            self._named.append((label, tuple(array.shape), key))
        if key not in self._where:
            self._blobs.setdefault(file, {})[key] = data
            self._where[key] = file
            if data_type == TensorProto.FLOAT:
                self._floats.append((array, key))
                self._cast_index = None
        return key

    def file_of(self, key: Key) -> str:
        return self._where[key]

    def reference(self, name: str, data_type: int, dims: tuple[int, ...]) -> TensorProto:
        """An external-data initializer; ``locate`` points it at its region once ``write`` has laid them out."""
        return TensorProto(name=name, data_type=data_type, dims=dims, data_location=TensorProto.EXTERNAL)

    def float16_sources(self, target: np.ndarray) -> list[tuple[np.ndarray, Key]]:
        """Stored float32 tensors whose float16 cast may be ``target`` (equal once tiny values are ignored)."""
        if self._cast_index is None:
            self._cast_index = defaultdict(list)
            for array, key in self._floats:
                self._cast_index[_cast_fingerprint(array.astype(np.float16))].append((array, key))
        return [s for s in self._cast_index.get(_cast_fingerprint(target), []) if s[0].size == target.size]

    @property
    def files(self) -> list[str]:
        return list(self._blobs)

    def write(self, directory: Path) -> None:
        """Write every weights file: tensors of 64 KiB or more first, each on a page boundary, then the smaller
        ones on 64-byte boundaries."""
        for file, blobs in self._blobs.items():
            if file == HALF_FILE:
                self._write_named(directory, blobs)
                continue
            order = sorted(blobs, key=lambda k: len(blobs[k]) < PAGE_ALIGNED_FROM)  # stable: arrival order kept
            buffer = bytearray()
            for key in order:
                data = blobs[key]
                buffer.extend(b"\0" * (-len(buffer) % (PAGE if len(data) >= PAGE_ALIGNED_FROM else 64)))
                self._regions[key] = Region(file, len(buffer), len(data))
                buffer.extend(data)
            (directory / file).write_bytes(bytes(buffer))

    def _write_named(self, directory: Path, blobs: dict[Key, bytes]) -> None:
        """HALF_FILE as a safetensors file (export/float16_storage.py): every named tensor end to end."""
        header, offsets = layout([(name, shape, blobs[key]) for name, shape, key in self._named])
        with open(directory / HALF_FILE, "wb") as f:
            f.write(header)
            for (_, _, key), offset in zip(self._named, offsets, strict=True):
                self._regions.setdefault(key, Region(HALF_FILE, offset, len(blobs[key])))
                f.write(blobs[key])

    def locate(self, tensor: TensorProto, key: Key) -> None:
        region = self._regions[key]
        del tensor.external_data[:]
        for name, value in (("location", region.file), ("offset", str(region.offset)), ("length", str(region.length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = name, value


class _GraphPacker:
    """Rewrites one graph's large initializers as references into the store (or exact functions of them)."""

    def __init__(
        self, model: onnx.ModelProto, store: WeightStore, own_file: str, half: bool = False, rows: bool = False
    ) -> None:
        self.model, self.store, self.own_file, self.half = model, store, own_file, half
        self.rows = rows  # float16 storage: gather a table's rows before casting them (not in step graphs)
        self.inits: list[TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.files: set[str] = set()  # the weights files this graph reads
        self.keys: dict[str, Key] = {}  # initializer name -> the stored tensor it reads
        self.names = {i.name for i in model.graph.initializer} | {o for n in model.graph.node for o in n.output}
        self.names |= {i.name for i in model.graph.input}

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.names:
            n += 1
            name = f"{base}{n}"
        self.names.add(name)
        return name

    def reference(self, name: str, data_type: int, dims: tuple[int, ...], key: Key) -> str:
        self.inits.append(self.store.reference(name, data_type, dims))
        self.files.add(self.store.file_of(key))
        self.keys[name] = key
        return name

    def store_own(self, init: TensorProto, array: np.ndarray) -> None:
        if self.half and init.data_type == TensorProto.FLOAT and (half := exact_half(array)) is not None:
            key = self.store.add(HALF_FILE, TensorProto.FLOAT16, half, OTHER + init.name)
            self.use(init.name, init.data_type, tuple(init.dims), (TensorProto.FLOAT16, key))
            return
        self.reference(
            init.name, init.data_type, tuple(init.dims), self.store.add(self.own_file, init.data_type, array)
        )

    def find(self, data_type: int, array: np.ndarray) -> tuple[int, Key] | None:
        """Where a tensor equal to ``array`` is stored: (its stored element type, its key), or None. Under float16
        storage a float32 tensor may be stored as float16 (it is then its exact Cast)."""
        key = self.store.find(data_type, array)
        if key is not None:
            return data_type, key
        if self.half and data_type == TensorProto.FLOAT and (half := exact_half(array)) is not None:
            key = self.store.find(TensorProto.FLOAT16, half)
            if key is not None:
                return TensorProto.FLOAT16, key
        return None

    def use(self, name: str, data_type: int, dims: tuple[int, ...], found: tuple[int, Key]) -> str:
        """``name`` as the stored tensor ``found`` (``find``): a reference, or the float32 Cast of a float16 one
        (constant-folded at session start, like the other derivations)."""
        stored_type, key = found
        if stored_type == data_type:
            return self.reference(name, data_type, dims, key)
        half = self.reference(self.fresh(f"{name}.float16"), stored_type, dims, key)
        self.nodes.append(helper.make_node("Cast", [half], [name], to=data_type, name=name + PACKED))
        return name

    def pack(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        casts: list[tuple[TensorProto, np.ndarray]] = []
        rearranged: list[tuple[TensorProto, np.ndarray, tuple[str, int, int]]] = []
        for init in self.model.graph.initializer:
            if init.data_location == TensorProto.EXTERNAL:
                raise ValueError(f"{init.name}: already external; pack self-contained graphs")
            array = numpy_helper.to_array(init)
            if array.nbytes < INLINE_BELOW:
                self.inits.append(init)
                counts["inline"] += 1
                continue
            found = self.find(init.data_type, array)
            if found is not None:
                self.use(init.name, init.data_type, tuple(init.dims), found)
                counts["shared"] += 1
            elif self.transpose(init, array) or self.concat(init, array):
                counts["derived"] += 1
            elif init.data_type == TensorProto.FLOAT16 and self.store.float16_sources(array):
                casts.append((init, array))
            elif init.data_type == TensorProto.FLOAT16 and (layout := self.float16_layout(array)):
                rearranged.append((init, array, layout))
            else:
                self.store_own(init, array)
                counts["stored"] += 1
        for init, array in casts:  # after the loop: one onnxruntime call per graph checks every Cast
            counts["derived" if self.cast(init, array) else "stored"] += 1
        for init, array, layout in rearranged:
            counts["derived" if self.cast_rearranged(init, array, layout) else "stored"] += 1
        graph = self.model.graph
        rest = [_copy(n) for n in graph.node]
        for node in rest:  # the torch exporter's debug annotations (stack traces, FX nodes): ~40% of a graph proto
            kept = [p for p in node.metadata_props if not p.key.startswith(DEBUG_METADATA)]
            del node.metadata_props[:]
            node.metadata_props.extend(kept)
        if self.rows:
            rest = self.gather_rows(rest)
        del graph.initializer[:]
        graph.initializer.extend(self.inits)
        del graph.node[:]
        graph.node.extend(self.nodes + rest)  # derivations read initializers only: first in topological order
        return dict(counts)

    def gather_rows(self, rest: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
        """A float16-stored table that only Gather reads (an embedding) is gathered as float16 and the rows are cast:
        the same values, without a float32 copy of the whole table in every session (the fused step, which takes
        the table itself, runs on step graphs: they keep their Cast)."""
        readers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
        for node in rest:
            for position, name in enumerate(node.input):
                readers[name].append((node, position))
        nested = {name for node in rest for a in node.attribute if a.g.node for n in a.g.node for name in n.input}
        outputs = {o.name for o in self.model.graph.output}
        widened: dict[str, onnx.NodeProto] = {}
        for cast in [n for n in self.nodes if n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT]:
            table, users = cast.output[0], readers.get(cast.output[0], [])
            if not users or table in nested | outputs or any(n.op_type != "Gather" or i for n, i in users):
                continue
            self.nodes.remove(cast)
            for gather, _ in users:
                rows = gather.output[0]
                gather.input[0], gather.output[0] = cast.input[0], self.fresh(f"{rows}.float16")
                widened[gather.output[0]] = helper.make_node("Cast", [gather.output[0]], [rows], to=TensorProto.FLOAT)
        out = []
        for node in rest:
            out += [node, widened[node.output[0]]] if node.output and node.output[0] in widened else [node]
        return out

    def transpose(self, init: TensorProto, array: np.ndarray) -> bool:
        if array.ndim != 2:
            return False
        found = self.find(init.data_type, array.T)
        if found is None:
            return False
        source = self.use(self.fresh(f"{init.name}.transposed"), init.data_type, array.T.shape, found)
        self.nodes.append(helper.make_node("Transpose", [source], [init.name], perm=[1, 0], name=init.name + PACKED))
        return True

    def concat(self, init: TensorProto, array: np.ndarray) -> bool:
        """``init`` as a Concat of stored pieces; under float16 storage a piece may be the Transpose of a stored one
        (the parameters are stored as PyTorch holds them: a fused Q|K|V projection joins three transposed ones)."""
        split = _equal_split(array, lambda piece: self.find_piece(init.data_type, piece))
        if split is None:
            return False
        axis, pieces, found = split
        sources = []
        for i, (piece, (transposed, where)) in enumerate(zip(pieces, found, strict=True)):
            name = self.fresh(f"{init.name}.part{i}")
            if transposed:
                source = self.use(self.fresh(f"{name}.transposed"), init.data_type, piece.T.shape, where)
                self.nodes.append(helper.make_node("Transpose", [source], [name], perm=[1, 0], name=name + PACKED))
            else:
                self.use(name, init.data_type, piece.shape, where)
            sources.append(name)
        self.nodes.append(helper.make_node("Concat", sources, [init.name], axis=axis, name=init.name + PACKED))
        return True

    def find_piece(self, data_type: int, piece: np.ndarray) -> tuple[bool, tuple[int, Key]] | None:
        """(transposed?, where) of a stored tensor equal to ``piece`` or, under float16 storage, to its transpose."""
        found = self.find(data_type, piece)
        if found is not None:
            return False, found
        if self.half and piece.ndim == 2 and (found := self.find(data_type, np.ascontiguousarray(piece.T))):
            return True, found
        return None

    def cast(self, init: TensorProto, target: np.ndarray) -> bool:
        """``init`` (float16) as Cast of a stored float32 tensor, patched where the converter clamped a value."""
        candidates = self.store.float16_sources(target)
        for (_, key), cast in zip(candidates, ort_cast_float16([c[0] for c in candidates]), strict=True):
            differ = np.flatnonzero(cast.reshape(-1).view(np.uint16) != target.reshape(-1).view(np.uint16))
            if len(differ) > MAX_PATCHED * target.size:
                continue
            name = self.reference(self.fresh(f"{init.name}.float32"), TensorProto.FLOAT, target.shape, key)
            output = init.name if not len(differ) else self.fresh(f"{init.name}.cast")
            self.nodes.append(helper.make_node("Cast", [name], [output], to=TensorProto.FLOAT16, name=output + PACKED))
            if len(differ):
                indices = np.stack(np.unravel_index(differ, target.shape), axis=-1).astype(np.int64)
                values = target.reshape(-1)[differ]
                where, what = self.fresh(f"{init.name}.patch_indices"), self.fresh(f"{init.name}.patch_values")
                self.inits += [numpy_helper.from_array(indices, where), numpy_helper.from_array(values, what)]
                self.nodes.append(
                    helper.make_node("ScatterND", [output, where, what], [init.name], name=init.name + PACKED)
                )
            return True
        self.store_own(init, target)
        return False

    def float16_layout(self, target: np.ndarray) -> tuple[str, int, int] | None:
        """How a float16 tensor with no float32 source of its own is a Cast of stored ones, rearranged:
        ("transpose", 0, 0) when its transpose has one (fp16 decoder_step's output projection), ("concat", axis,
        parts) when each of ``parts`` equal pieces along ``axis`` has one (its fused Q|K|V projection)."""
        if target.ndim == 2 and self.store.float16_sources(np.ascontiguousarray(target.T)):
            return ("transpose", 0, 0)
        split = _equal_split(target, lambda piece: self.store.float16_sources(np.ascontiguousarray(piece)) or None)
        return None if split is None else ("concat", split[0], len(split[1]))

    def cast_rearranged(self, init: TensorProto, target: np.ndarray, layout: tuple[str, int, int]) -> bool:
        """``init`` as Transpose or Concat of float16 Casts (``cast``, each checked bit for bit) of stored tensors;
        a piece whose Cast does not check out is stored as it is (the result is exact either way)."""
        kind, axis, parts = layout
        pieces = [target.T] if kind == "transpose" else np.split(target, parts, axis=axis)
        names, derived = [], True
        for i, piece in enumerate(pieces):
            piece = np.ascontiguousarray(piece)
            name = self.fresh(f"{init.name}.{kind}{i}")
            derived &= self.cast(TensorProto(name=name, data_type=TensorProto.FLOAT16, dims=piece.shape), piece)
            names.append(name)
        if kind == "transpose":
            node = helper.make_node("Transpose", names, [init.name], perm=[1, 0], name=init.name + PACKED)
        else:
            node = helper.make_node("Concat", names, [init.name], axis=axis, name=init.name + PACKED)
        self.nodes.append(node)
        return derived


def _equal_split(array: np.ndarray, source: Callable[[np.ndarray], Any]) -> tuple[int, list, list] | None:
    """The first way to cut ``array`` into 2 to 8 equal pieces along one axis where ``source`` finds something (not
    None) for every piece: (axis, pieces, what it found for each); None when there is none."""
    for axis in range(array.ndim):
        for parts in range(2, 9):
            if array.shape[axis] % parts:
                continue
            pieces = np.split(array, parts, axis=axis)
            found = []
            for piece in pieces:
                hit = source(piece)
                if hit is None:
                    break
                found.append(hit)
            else:
                return axis, pieces, found
    return None


def _copy(message):
    out = type(message)()
    out.CopyFrom(message)
    return out


def pack_bundle(
    bundle_dir: Path, variants: dict[str, dict[str, Any]], float16_storage: dict[str, np.ndarray] | None = None
) -> tuple[dict[str, dict[str, Any]], dict]:
    """Rewrite the format-1 graphs of ``bundle_dir`` (``<variant>/<graph>.onnx``) into ``graphs/``; remove them.

    ``float16_storage``: the model's parameters by name (export/float16_storage.py ``parameters``), rounded to
    float16 by the export (export.cli ``--float16-storage``). They are stored first, as float16 under their names,
    in ``HALF_FILE`` (a safetensors file), and so is every other float32 tensor that float16 holds exactly; a graph
    reads each as its Cast to float32 (or a Transpose or Concat of such Casts), which onnxruntime's constant
    folding computes at session start: the same constants as before, in half the bytes on disk. The tensors
    float16 does not hold are stored as float32, as without it.

    Returns the variants' manifest entries (graph paths under ``graphs/``, ``weights``: the weights files their
    graphs read) and a report: per graph what became of its large tensors (shared / derived / stored / inline).
    """
    if sys.byteorder != "little":
        raise RuntimeError("external data is little-endian; pack on a little-endian machine")
    out = bundle_dir / GRAPHS_DIR
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    store = WeightStore()
    for name, array in (float16_storage or {}).items():
        if (half := exact_half(array)) is not None:
            store.add(HALF_FILE, TensorProto.FLOAT16, half, name)
    half_storage = float16_storage is not None
    packed: dict[str, dict[str, Any]] = {}
    models: dict[Path, tuple[onnx.ModelProto, dict[str, Key]]] = {}
    report: dict[str, dict[str, int]] = {}
    reads: dict[str, set[str]] = {}
    for variant, entry in variants.items():  # fp32 first: the other variants read its tensors
        packed[variant] = dict(entry)
        reads[variant] = set()
        for graph in GRAPH_KEYS:
            if graph not in entry:
                continue
            model = onnx.load(str(bundle_dir / entry[graph]))
            packer = _GraphPacker(model, store, weights_file(variant), half_storage, graph not in STEP_GRAPHS)
            report[f"{variant}.{graph}"] = packer.pack()
            reads[variant] |= packer.files
            path = out / f"{variant}.{graph}.onnx"
            models[path] = model, packer.keys
            packed[variant][graph] = f"{GRAPHS_DIR}/{path.name}"
    store.write(out)
    for path, (model, keys) in models.items():
        for init in model.graph.initializer:
            if init.name in keys:
                store.locate(init, keys[init.name])
        path.write_bytes(model.SerializeToString())
        onnx.checker.check_model(str(path), full_check=True)
    for variant in packed:
        packed[variant]["weights"] = [f"{GRAPHS_DIR}/{f}" for f in store.files if f in reads[variant]]
    for variant, entry in variants.items():
        for graph in GRAPH_KEYS:
            if graph in entry:
                (bundle_dir / entry[graph]).unlink()
        folder = bundle_dir / variant
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    return packed, report


def weight_names(model: onnx.ModelProto) -> set[str]:
    """The graph's weights: its initializers and the tensors the packer derives from them (``PACKED`` nodes)."""
    names = {i.name for i in model.graph.initializer}
    return names | {out for n in model.graph.node if n.name.endswith(PACKED) for out in n.output}


# --- what a bundle stores: used by tests and by the sizes in docs/model-card.md ---------------------------------


def tensors(path: Path) -> list[tuple[TensorProto, bytes | None, Region | None]]:
    """(initializer, inline bytes or None, external region or None) of every initializer of a graph file."""
    out = []
    for init in onnx.load(str(path), load_external_data=False).graph.initializer:
        if init.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in init.external_data}
            out.append((init, None, Region(info["location"], int(info.get("offset", 0)), int(info["length"]))))
        else:
            out.append((init, _bytes(numpy_helper.to_array(init)), None))
    return out


def storage(bundle_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Bytes per variant (its graph files and its own weights file), the weights files each reads, and every
    tensor stored twice: equal bytes in two regions of the weights files, or a large inline tensor repeated
    in the graphs of one variant (both empty for a packed bundle)."""
    files = manifest["files"]
    variants: dict[str, dict[str, Any]] = {}
    regions: dict[Region, tuple[int, str]] = {}
    inline: dict[str, dict[Key, list[str]]] = {}
    for variant, entry in manifest["variants"].items():
        graphs = [entry[g] for g in GRAPH_KEYS if g in entry]
        mine = {weights_file(variant)} | ({HALF_FILE} if variant == "fp32" else set())  # fp32's, stored as float16
        own = [w for w in entry.get("weights", []) if Path(w).name in mine]
        variants[variant] = {
            "graphs": sum(files[g]["size"] for g in graphs),
            "weights": sum(files[w]["size"] for w in own),
            "reads": entry.get("weights", []),
        }
        variants[variant]["total"] = variants[variant]["graphs"] + variants[variant]["weights"]
        inline[variant] = defaultdict(list)
        for rel in graphs:
            path = bundle_dir / rel
            for init, data, region in tensors(path):
                if region is not None:
                    regions[
                        Region(str((path.parent / region.file).relative_to(bundle_dir)), region.offset, region.length)
                    ] = (
                        init.data_type,
                        f"{rel}:{init.name}",
                    )
                elif data is not None and len(data) >= INLINE_BELOW:
                    inline[variant][_key(init.data_type, data)].append(f"{rel}:{init.name}")
    by_content: dict[Key, set[Region]] = defaultdict(set)
    for region, (data_type, _) in regions.items():
        with open(bundle_dir / region.file, "rb") as f:
            f.seek(region.offset)
            by_content[_key(data_type, f.read(region.length))].add(region)
    duplicates = [sorted(regions[r][1] for r in rs) for rs in by_content.values() if len(rs) > 1]
    duplicates += [names for per in inline.values() for names in per.values() if len(names) > 1]
    return {
        "variants": variants,
        "total": sum(meta["size"] for meta in files.values()),
        "duplicates": duplicates,
    }
