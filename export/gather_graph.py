"""The row-gather graph the engine runs on a device (``engine/gather.onnx``): ``y = Gather(x, indices, 0)``.

With I/O binding the key/value cache and the cross-attention keys/values stay on the device for the whole decode
(engine/device_state.py); this graph moves data there without a copy to the host: it reorders cache rows
when beams trade places or sentences finish (1-D ``indices``) and takes one layer out of the encoder's stacked
cross keys/values (a scalar ``indices``). Inputs have no shape at all (any rank; onnx's checker wants one,
onnxruntime does not), so one graph serves every tensor; float32 only, the type every variant's graphs take and
give (fp16 variants keep float32 inputs and outputs).

The service may not import ``onnx``, so the graph is committed as a file; ``python -m export.gather_graph``
rewrites it and tests/export/test_gather_graph.py checks that the committed bytes are what this builds.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

GATHER_GRAPH = Path(__file__).resolve().parent.parent / "engine" / "gather.onnx"


def build_gather_graph() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    indices = helper.make_tensor_value_info("indices", TensorProto.INT64, None)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Gather", ["x", "indices"], ["y"], name="gather_rows", axis=0)
    graph = helper.make_graph([node], "gather_rows", [x, indices], [y])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="mtserve.export")
    proto.ir_version = 9
    return proto


def main() -> None:
    GATHER_GRAPH.write_bytes(build_gather_graph().SerializeToString(deterministic=True))
    print(f"wrote {GATHER_GRAPH}")


if __name__ == "__main__":
    main()
