"""Lookup tables that an engine's sessions share: one read-only mapping of each table per engine.

A bundle's graphs read the tied embedding from the same region of ``fp32.weights`` (the encoder's source embedding,
every step graph's target embedding, the search loop's). onnxruntime maps an external initializer into each session
on its own, so every session that looks tokens up kept its own resident copy of the rows it had touched: on de-en 3
(int8) two such mappings after batch decoding (13 MiB each) and a third once the search loop ran
(docs/engine-speed-log.md, item 30). ``SharedTables`` hands every session the same numpy memory map of such a region
(``SessionOptions.add_initializer``), so the rows a process touched are resident once.

Only tables that every node reading them in that graph reads with ``Gather``: a row lookup has nothing to prepack or
constant-fold (onnxruntime does both per session to weights that feed products), so sharing changes no kernel.
Tables under ``min_bytes`` (1 MiB) are left to onnxruntime.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort

from core.onnx_wire import ExternalTensor, external_tensors

MIN_BYTES = 1 << 20
# TensorProto.DataType -> numpy (the ones a table can have)
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 10: np.float16, 11: np.float64}


class SharedTables:
    """One engine's shared lookup tables: ``for_graph(path)`` gives the initializers to hand a new session of the
    graph file ``path``, by name. Holds the memory maps (and their OrtValues) for as long as it lives: keep it with
    the sessions."""

    def __init__(self, min_bytes: int = MIN_BYTES) -> None:
        self.min_bytes = min_bytes
        self._lock = threading.Lock()
        self._values: dict[tuple, ort.OrtValue] = {}

    def for_graph(self, path: Path) -> dict[str, ort.OrtValue]:
        out = {}
        for name, tensor in external_tensors(path).items():
            if tensor.readers == {"Gather"} and tensor.length >= self.min_bytes and tensor.data_type in DTYPES:
                out[name] = self._value(Path(path).parent, tensor)
        return out

    def _value(self, folder: Path, tensor: ExternalTensor) -> ort.OrtValue:
        file = (folder / tensor.location).resolve()
        key = (file, tensor.offset, tensor.length, tensor.data_type, tensor.dims)
        with self._lock:
            if key not in self._values:
                dtype = np.dtype(DTYPES[tensor.data_type])
                if int(np.prod(tensor.dims, dtype=np.int64)) * dtype.itemsize != tensor.length:
                    raise ValueError(f"{file.name}: {tensor.name}'s region does not hold its {tensor.dims} {dtype}")
                table = np.memmap(file, dtype=dtype, mode="r", offset=tensor.offset, shape=tensor.dims)
                self._values[key] = ort.OrtValue.ortvalue_from_numpy(table)  # keeps a reference to the map
            return self._values[key]

    def __len__(self) -> int:
        return len(self._values)
