"""One map of the embedding per engine (engine/shared_tables.py) and the graph reader it stands on
(core/onnx_wire.py): the reader sees what onnx sees, an engine's sessions map the shipped bundle's embedding once
instead of once each, and the answers do not change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from core.bundle import load_bundle
from core.onnx_wire import ExternalTensor, external_tensors
from engine import Engine
from engine.decoding import TranslateOptions
from engine.runtime import create_session
from engine.shared_tables import SharedTables

ROOT = Path(__file__).resolve().parents[2]
GENERAL = ROOT / "model_repository" / "de-en" / "3"  # the shipped general-domain bundle (int8 default)
SENTENCES = [
    "Ein Mann fährt Fahrrad.",
    "Die Regierung hat am Dienstag neue Regeln für den Handel mit Energie vorgestellt.",
    "Kinder spielen Fußball auf einer Wiese.",
]


def onnx_view(path: Path) -> dict[str, tuple]:
    """What onnx itself reads of a graph file's external initializers (subgraphs included): name -> (data type,
    dims, location, offset, length, op types of their readers)."""
    model = onnx.load(str(path), load_external_data=False)
    found, reads = {}, []

    def walk(graph) -> None:
        for tensor in graph.initializer:
            if tensor.data_location == TensorProto.EXTERNAL:
                info = {entry.key: entry.value for entry in tensor.external_data}
                found[tensor.name] = [tensor.data_type, tuple(tensor.dims), info["location"]]
                found[tensor.name] += [int(info.get("offset", 0)), int(info["length"]), set()]
        for node in graph.node:
            reads.extend((name, node.op_type) for name in node.input)
            for attribute in node.attribute:
                for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                    walk(sub)

    walk(model.graph)
    for name, op_type in reads:
        if name in found:
            found[name][5].add(op_type)
    return {name: tuple(v) for name, v in found.items()}


def wire_view(path: Path) -> dict[str, tuple]:
    return {
        t.name: (t.data_type, t.dims, t.location, t.offset, t.length, t.readers)
        for t in external_tensors(path).values()
    }


@pytest.mark.parametrize("graph", sorted(p.name for p in (GENERAL / "graphs").glob("*.onnx")))
def test_the_wire_reader_sees_what_onnx_sees_in_the_shipped_graphs(graph):
    path = GENERAL / "graphs" / graph
    assert wire_view(path) == onnx_view(path)
    assert wire_view(path)  # every shipped graph keeps its weights outside the proto


def test_the_wire_reader_on_a_loop_body_reading_an_outer_table_and_unpacked_dims(tmp_path):
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    (tmp_path / "w.bin").write_bytes(b"\0" * 64 + table.tobytes())
    init = TensorProto(name="table", data_type=TensorProto.FLOAT, dims=[6, 2])
    init.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "64"), ("length", str(table.nbytes))):
        init.external_data.add(key=key, value=value)

    def info(name, kind, shape):
        return helper.make_tensor_value_info(name, kind, shape)

    gather = helper.make_node("Gather", ["table", "ids"], ["rows"])
    keep = helper.make_node("Identity", ["c"], ["c_out"])
    inputs = [info("i", TensorProto.INT64, []), info("c", TensorProto.BOOL, [])]
    body = helper.make_graph(
        [gather, keep], "body", inputs, [info("c_out", TensorProto.BOOL, []), info("rows", 1, None)]
    )
    loop = helper.make_node("Loop", ["n", "cond"], ["stacked"], body=body)
    inputs = [info("n", TensorProto.INT64, []), info("cond", TensorProto.BOOL, []), info("ids", TensorProto.INT64, [3])]
    graph = helper.make_graph([loop], "outer", inputs, [info("stacked", 1, None)], initializer=[init])
    path = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph), str(path))
    assert wire_view(path) == {"table": (1, (6, 2), "w.bin", 64, table.nbytes, {"Gather"})} == onnx_view(path)
    # dims as one packed field (how a proto3 writer encodes them; onnx's proto2 writes a varint each) read the same
    data = bytearray(path.read_bytes())
    at = data.index(bytes([0x08, 6, 0x08, 2]))  # field 1 twice: dims 6, 2
    data[at : at + 4] = bytes([0x0A, 2, 6, 2])  # field 1, 2 bytes long: 6, 2
    path.write_bytes(bytes(data))
    assert wire_view(path)["table"][1] == (6, 2)

    tables = SharedTables(min_bytes=0)
    session = create_session(path, "cpu", tables=tables)
    assert len(tables) == 1
    out = session.run(None, {"n": np.array(2), "cond": np.array(True), "ids": np.array([5, 0, 2])})[0]
    np.testing.assert_array_equal(out, np.stack([table[[5, 0, 2]]] * 2))


def test_a_region_that_cannot_hold_its_shape_is_refused(tmp_path):
    tables = SharedTables(min_bytes=0)
    (tmp_path / "w.bin").write_bytes(b"\0" * 64)
    with pytest.raises(ValueError, match="does not hold"):
        tables._value(tmp_path, ExternalTensor("t", 1, (4, 4), "w.bin", 0, 32))


MAPPINGS = """
import json, sys
from core.bundle import load_bundle
from engine import Engine, TranslateOptions
engine = Engine(load_bundle(sys.argv[1]), "int8", "cpu", intra_op_threads=1, shared_tables=sys.argv[2] == "1")
engine.translate(["Ein Mann fährt Fahrrad."], TranslateOptions(beam_size=4))  # the search loop's session
engine.live_step  # and the live decode's
table = 16000 * 256 * 4  # the tied embedding's region of fp32.weights
maps = [line.split() for line in open("/proc/self/maps") if line.rstrip().endswith("fp32.weights")]
print(json.dumps(sum(int(end, 16) - int(start, 16) >= table for start, end in (m[0].split("-") for m in maps))))
"""


def test_the_sessions_of_an_engine_map_the_embedding_once():
    """Encoder, whole-batch step, search loop and live step sessions of de-en 3: one map of the embedding's region
    with shared tables, one per session that looks tokens up without (each its own fresh process)."""
    counts = {}
    for shared in ("1", "0"):
        done = subprocess.run(
            [sys.executable, "-c", MAPPINGS, str(GENERAL), shared], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        counts[shared] = json.loads(done.stdout)
    assert counts == {"1": 1, "0": 4}


@pytest.fixture(scope="module")
def engines():
    bundle = load_bundle(GENERAL)
    return [Engine(bundle, "int8", "cpu", intra_op_threads=1, shared_tables=s) for s in (True, False)]


@pytest.mark.parametrize("beam", [1, 4])
def test_shared_tables_change_no_answer(engines, beam):
    shared, own = engines
    assert shared.tables is not None and len(shared.tables) == 1 and own.tables is None
    options = TranslateOptions(beam_size=beam)
    for texts in (SENTENCES, SENTENCES[1:2]):  # a batch, and one sentence alone (the search loop)
        a, b = shared.translate(texts, options), own.translate(texts, options)
        assert [(t.token_ids, t.score, t.hypotheses) for t in a] == [(t.token_ids, t.score, t.hypotheses) for t in b]
