"""The external tensors of an ONNX graph file and the ops that read them, from the protobuf wire format.

Format-2 bundles keep a graph's large tensors as ONNX external data: regions of a ``*.weights`` file that several
graphs name (core/bundle.py). Serving installs no ``onnx`` package, so this reads the few fields it needs straight
from the graph's protobuf encoding (https://protobuf.dev/programming-guides/encoding/; field numbers from onnx.proto3):

- ModelProto.graph (7); GraphProto.node (1), .initializer (5); NodeProto.input (1), .output (2), .op_type (4),
  .attribute (5); AttributeProto.name (1), .f (2), .i (3), .g (6), .graphs (11) (subgraphs: a Loop's or an If's
  body, whose nodes may read the outer graph's initializers);
- TensorProto.dims (1), .data_type (2), .int32_data (5), .name (8), .raw_data (9), .external_data (13: key 1,
  value 2), .data_location (14).

``fields`` / ``raw_fields``: one message's fields, decoded or as their whole encodings (to copy them unchanged);
``nodes`` / ``initializers``: a graph's nodes (their subgraphs' nodes inside) and initializers;
``external_tensors(path)``: every initializer stored as external data, subgraphs included, with the op types of the
nodes that read it (in any graph of the file). engine/fused_step_graph.py rewrites graphs with these.
"""

from __future__ import annotations

import struct
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


def encode_varint(value: int) -> bytes:
    """``value`` as a protobuf varint (``varint``'s inverse; a negative int64 as its 64-bit two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _scan(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, start of the field's encoding, value) of one message: an int for varints, the bytes otherwise."""
    i, end = 0, len(buf)
    while i < end:
        start = i
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
        yield number, start, value


def fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one message: an int for varints, the bytes otherwise."""
    for number, _, value in _scan(buf):
        yield number, value


def raw_fields(buf: bytes) -> list[tuple[int, bytes]]:
    """(field number, the field's whole encoding, key included) of one message, to copy fields unchanged."""
    scanned = list(_scan(buf))
    ends = [start for _, start, _ in scanned[1:]] + [len(buf)]
    return [(number, buf[start:end]) for (number, start, _), end in zip(scanned, ends, strict=True)]


def packed_varints(value: int | bytes) -> list[int]:
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = varint(value, i)
        out.append(v)
    return out


def string(value: int | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class Node:
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, object] = field(default_factory=dict)  # float and int attributes by name
    subgraphs: list[bytes] = field(default_factory=list)  # GraphProto encodings (a Loop's body, an If's branches)
    _parsed: list[list[Node]] | None = field(default=None, repr=False, compare=False)

    def subgraph_nodes(self) -> list[list[Node]]:
        """The nodes of each subgraph (parsed once)."""
        if self._parsed is None:
            self._parsed = [nodes(graph) for graph in self.subgraphs]
        return self._parsed


def attribute(buf: bytes) -> tuple[str, object, list[bytes]]:
    """An AttributeProto's name, its float or int value (None otherwise) and its subgraphs' encodings."""
    name, value, graphs = "", None, []
    for number, v in fields(buf):
        if number == 1:
            name = string(v)
        elif number == 2:  # f (fixed32)
            value = struct.unpack("<f", v)[0]
        elif number == 3:  # i (varint, two's complement)
            value = v - (1 << 64) if isinstance(v, int) and v >= 1 << 63 else v
        elif number in (6, 11):
            graphs.append(v)
    return name, value, graphs


def nodes(graph: bytes) -> list[Node]:
    """The nodes of a GraphProto encoding, in order."""
    out = []
    for number, value in fields(graph):
        if number != 1:
            continue
        node = Node("", [], [])
        for n, v in fields(value):
            if n == 1:
                node.inputs.append(string(v))
            elif n == 2:
                node.outputs.append(string(v))
            elif n == 4:
                node.op_type = string(v)
            elif n == 5:
                name, attr, graphs = attribute(v)
                node.attributes[name] = attr
                node.subgraphs += graphs
        out.append(node)
    return out


@dataclass
class Tensor:
    name: str
    data_type: int  # TensorProto.DataType (1 float, 2 uint8, 3 int8, 6 int32, 7 int64, 10 float16, 11 double)
    dims: tuple[int, ...]
    raw: bytes | None  # inline raw_data
    external: dict[str, str] | None  # external_data's entries (location, offset, length) when stored outside
    ints: list[int] = field(default_factory=list)  # inline int32_data (int8 / uint8 / int32 tensors without raw_data)


def tensor(buf: bytes) -> Tensor:
    """One TensorProto encoding."""
    name, data_type, dims, raw, location, external, ints = "", 0, [], None, 0, {}, []
    for number, value in fields(buf):
        if number == 1:
            dims += packed_varints(value)
        elif number == 2:
            data_type = value
        elif number == 5:
            ints += packed_varints(value)
        elif number == 8:
            name = string(value)
        elif number == 9:
            raw = value
        elif number == 13:
            entry = dict(fields(value))
            external[string(entry.get(1, b""))] = string(entry.get(2, b""))
        elif number == 14:
            location = value
    return Tensor(name, data_type, tuple(dims), raw, external if location == EXTERNAL else None, ints)


def initializers(graph: bytes) -> dict[str, Tensor]:
    """The initializers of a GraphProto encoding (not its subgraphs'), by name."""
    return {t.name: t for t in (tensor(value) for number, value in fields(graph) if number == 5)}


def _graph(buf: bytes, tensors: dict[str, ExternalTensor], reads: list[tuple[str, str]]) -> None:
    for t in initializers(buf).values():
        if t.external is not None:
            e = t.external
            tensors[t.name] = ExternalTensor(
                t.name, t.data_type, t.dims, e["location"], int(e.get("offset", 0)), int(e["length"])
            )
    for node in nodes(buf):
        for sub in node.subgraphs:
            _graph(sub, tensors, reads)
        reads += [(name, node.op_type) for name in node.inputs]


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
