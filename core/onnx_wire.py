"""The external tensors of an ONNX graph file and the ops that read them, from the protobuf wire format.

Format-2 bundles keep a graph's large tensors as ONNX external data: regions of a ``*.weights`` file that several
graphs name (core/bundle.py). Serving installs no ``onnx`` package, so this reads the few fields it needs straight
from the graph's protobuf encoding (https://protobuf.dev/programming-guides/encoding/; field numbers from onnx.proto3):

- ModelProto.graph (7); GraphProto.node (1), .initializer (5); NodeProto.input (1), .op_type (4), .attribute (5);
  AttributeProto.g (6), .graphs (11) (subgraphs: a Loop's or an If's body, whose nodes may read the outer graph's
  initializers);
- TensorProto.dims (1), .data_type (2), .name (8), .external_data (13: key 1, value 2), .data_location (14).

``external_tensors(path)``: every initializer stored as external data, subgraphs included, with the op types of the
nodes that read it (in any graph of the file).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


@dataclass
class ExternalTensor:
    name: str
    data_type: int  # TensorProto.DataType (1 float, 2 uint8, 3 int8, 6 int32, 7 int64, 10 float16, 11 double)
    dims: tuple[int, ...]
    location: str  # relative to the graph file's folder
    offset: int
    length: int
    readers: set[str] = field(default_factory=set)  # op types of the nodes that read it


def varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one message: an int for varints, the bytes otherwise."""
    i, end = 0, len(buf)
    while i < end:
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 2:
            size, i = varint(buf, i)
            value, i = buf[i : i + size], i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = buf[i : i + size], i + size
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {i} (groups are not used by ONNX)")
        yield number, value


def packed_varints(value: int | bytes) -> list[int]:
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = varint(value, i)
        out.append(v)
    return out


def _tensor(buf: bytes) -> ExternalTensor | None:
    name, data_type, dims, location, external = "", 0, [], 0, {}
    for number, value in fields(buf):
        if number == 1:
            dims += packed_varints(value)
        elif number == 2:
            data_type = value
        elif number == 8:
            name = value.decode()
        elif number == 13:
            entry = dict(fields(value))
            external[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
        elif number == 14:
            location = value
    if location != EXTERNAL:
        return None
    return ExternalTensor(
        name, data_type, tuple(dims), external["location"], int(external.get("offset", 0)), int(external["length"])
    )


def _graph(buf: bytes, tensors: dict[str, ExternalTensor], reads: list[tuple[str, str]]) -> None:
    for number, value in fields(buf):
        if number == 5:
            tensor = _tensor(value)
            if tensor is not None:
                tensors[tensor.name] = tensor
        elif number == 1:
            op_type, inputs = "", []
            for n, v in fields(value):
                if n == 1:
                    inputs.append(v.decode())
                elif n == 4:
                    op_type = v.decode()
                elif n == 5:
                    for a, sub in fields(v):
                        if a in (6, 11):
                            _graph(sub, tensors, reads)
            reads += [(name, op_type) for name in inputs]


def external_tensors(path: Path) -> dict[str, ExternalTensor]:
    """Every initializer of the ONNX graph file ``path`` (its subgraphs' too) stored as external data, by name."""
    tensors: dict[str, ExternalTensor] = {}
    reads: list[tuple[str, str]] = []
    for number, value in fields(Path(path).read_bytes()):
        if number == 7:
            _graph(value, tensors, reads)
    for name, op_type in reads:
        if name in tensors:
            tensors[name].readers.add(op_type)
    return tensors
