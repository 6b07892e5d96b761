"""Read a CTranslate2 ``model.bin``: its header, variables and aliases, int8 / int16 weights de-quantized to float32.

The format, as ctranslate2/specs/model_spec.py ``_serialize`` writes it and src/models/model.cc reads it (little
endian throughout; a string is a uint16 byte count, the UTF-8 bytes and a NUL counted in it):

- uint32 binary version (6 today; 1 to 6 are read here);
- version >= 2: string spec name (``TransformerSpec``), uint32 spec revision;
- uint32 variable count, then per variable: string name, uint8 rank, rank x uint32 dimensions, then
  version >= 4: uint8 dtype id (float32, int8, int16, int32, float16, bfloat16) and uint32 byte count;
  older: uint8 item size (4: float32, 2: int16, 1: int8) and uint32 item count; then the bytes;
- version >= 3: uint32 alias count, then per alias: string alias, string name of the variable it stands for
  (a duplicate tensor, e.g. a tied output projection, is written once).

A quantized weight ``.../weight`` has a ``.../weight_scale`` beside it: int8 per output row (``weight = q / scale``
row by row, which is how CTranslate2 itself de-quantizes a model loaded with ``compute_type="float32"``), int16 one
scalar. Scalars hold the spec's attributes (``num_heads``, ``pre_norm``, ``activation``, ...).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")  # the dtype ids of version >= 4
ITEM_SIZES = {4: "float32", 2: "int16", 1: "int8"}  # versions < 4
MAX_BINARY_VERSION = 6


class ModelFormatError(ValueError):
    """The file is not a model.bin this reader understands; the message says where it stopped."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise ModelFormatError(f"model.bin ends at byte {len(self.data)}: {n} more expected at {self.at}")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def string(self) -> str:
        (n,) = self.unpack("H")
        return self.take(n).rstrip(b"\0").decode("utf-8")


def _array(raw: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bfloat16":  # numpy has no bfloat16: its 16 bits are the high half of a float32
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape).copy()


@dataclass
class CT2Model:
    binary_version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> the variable it stands for
    stored: dict[str, str] = field(default_factory=dict)  # variable -> dtype in the file (bfloat16: read as float32)

    def names(self) -> set[str]:
        return set(self.variables) | set(self.aliases)

    def raw(self, name: str) -> np.ndarray:
        name = self.aliases.get(name, name)
        if name not in self.variables:
            raise KeyError(name)
        return self.variables[name]

    def has(self, name: str) -> bool:
        return name in self.variables or name in self.aliases

    def weight(self, name: str) -> np.ndarray:
        """A tensor as float32: int8 rows divided by their ``_scale``, int16 by its scalar scale."""
        value = self.raw(name)
        if value.dtype in (np.int8, np.int16):
            scale_name = f"{self.aliases.get(name, name)}_scale"
            if scale_name not in self.variables:
                raise ModelFormatError(f"{name} is {value.dtype} without {scale_name}")
            scale = self.variables[scale_name].astype(np.float32)
            values = value.astype(np.float32)
            return values / (scale.reshape(-1, *([1] * (values.ndim - 1))) if scale.ndim else scale)
        return value.astype(np.float32)

    def attribute(self, name: str, default=None):
        """A scalar attribute as a Python number (a missing one: ``default``)."""
        if not self.has(name):
            return default
        value = self.raw(name)
        if value.size != 1:
            raise ModelFormatError(f"{name} has shape {value.shape}, an attribute is a scalar")
        return value.reshape(()).item()

    def quantization(self) -> str:
        """How the matrices are stored: int8, int16, float16, bfloat16 or float32 (the first one's dtype)."""
        matrices = sorted(n for n, v in self.variables.items() if v.ndim == 2 and n.endswith("weight"))
        return self.stored[matrices[0]] if matrices else "float32"


def read_model(source: str | Path | bytes) -> CT2Model:
    """A model.bin from its path or its bytes."""
    path = "model.bin" if isinstance(source, bytes) else source
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    r = _Reader(data)
    (version,) = r.unpack("I")
    if not 1 <= version <= MAX_BINARY_VERSION:
        raise ModelFormatError(f"{path}: binary version {version}; versions 1 to {MAX_BINARY_VERSION} are read")
    spec, revision = "", 1
    if version >= 2:
        spec = r.string()
        (revision,) = r.unpack("I")
    (count,) = r.unpack("I")
    variables: dict[str, np.ndarray] = {}
    stored: dict[str, str] = {}
    for _ in range(count):
        name = r.string()
        (rank,) = r.unpack("B")
        shape = r.unpack(f"{rank}I") if rank else ()
        if version >= 4:
            type_id, n_bytes = r.unpack("BI")
            if type_id >= len(DTYPES):
                raise ModelFormatError(f"{path}: {name} has dtype id {type_id}, not one of {DTYPES}")
            dtype = DTYPES[type_id]
        else:
            item_size, n_items = r.unpack("BI")
            if item_size not in ITEM_SIZES:
                raise ModelFormatError(f"{path}: {name} has item size {item_size}")
            dtype, n_bytes = ITEM_SIZES[item_size], n_items * item_size
        expected = int(np.prod(shape, dtype=np.int64)) * (2 if dtype == "bfloat16" else np.dtype(dtype).itemsize)
        if n_bytes != expected:
            raise ModelFormatError(f"{path}: {name} {shape} {dtype} holds {n_bytes} bytes, expected {expected}")
        variables[name], stored[name] = _array(r.take(n_bytes), dtype, tuple(shape)), dtype
    aliases: dict[str, str] = {}
    if version >= 3 and r.at < len(data):
        (n_aliases,) = r.unpack("I")
        for _ in range(n_aliases):
            alias = r.string()
            aliases[alias] = r.string()
    if r.at != len(data):
        raise ModelFormatError(f"{path}: {len(data) - r.at} bytes after the last alias")
    missing = sorted(a for a, target in aliases.items() if target not in variables)
    if missing:
        raise ModelFormatError(f"{path}: aliases of no variable: {missing}")
    return CT2Model(version, spec, revision, variables, aliases, stored)
