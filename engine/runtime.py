"""onnxruntime sessions: provider choice, thread settings, and the providers that really run."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import onnxruntime as ort

from engine.shared_tables import SharedTables

log = logging.getLogger(__name__)

PROVIDER_CHOICES = ("auto", "cpu", "cuda")


class ProviderError(RuntimeError):
    pass


# Every CPU session of the process allocates from one onnxruntime arena (its "environment allocator") instead of an
# arena of its own. An arena never gives memory back and grows by doubling, so each session's arena kept its own
# peak: with two models loaded, 229 MiB peak RSS against 186 MiB shared (bench/engine_memory.py); one model 192
# against 174 (bench/engine.py), at the same CPU time (docs/engine-speed-log.md, item 15). The arena's settings are
# onnxruntime's defaults (-1 each; an initial chunk of 0 bytes makes the arena spin forever).
USE_ENV_ALLOCATORS = "session.use_env_allocators"
_shared_arena_lock = threading.Lock()
# where a model given as bytes finds its external weights (onnxruntime resolves them next to a model file otherwise)
EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"
_shared_arena_registered = False


def register_shared_cpu_arena() -> None:
    """Register the process's shared CPU arena with onnxruntime, once; sessions opt in through USE_ENV_ALLOCATORS."""
    global _shared_arena_registered
    with _shared_arena_lock:
        if _shared_arena_registered:
            return
        memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        # max_mem 0 = no limit; arena_extend_strategy, initial_chunk_size_bytes, max_dead_bytes_per_chunk: defaults
        ort.create_and_register_allocator(memory, ort.OrtArenaCfg(0, -1, -1, -1))
        _shared_arena_registered = True


def requested_providers(choice: str) -> list[str]:
    if choice not in PROVIDER_CHOICES:
        raise ProviderError(f"provider must be one of {PROVIDER_CHOICES}, got {choice!r}")
    available = ort.get_available_providers()
    if choice == "cpu":
        return ["CPUExecutionProvider"]
    if choice == "cuda" and "CUDAExecutionProvider" not in available:
        raise ProviderError(f"CUDA requested but this onnxruntime build offers only {available}")
    if "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def create_session(
    path: Path,
    choice: str = "auto",
    intra_op_threads: int = 1,
    inter_op_threads: int = 1,
    optimization: str = "all",
    shared_arena: bool = True,
    tables: SharedTables | None = None,
    memory_pattern: bool = True,
    prepack: bool = True,
    model: bytes | None = None,
    custom_ops: Path | None = None,
) -> ort.InferenceSession:
    """A session on the asked providers; with ``cuda`` it fails unless CUDA really initialised.

    onnxruntime-gpu falls back to CPU silently when CUDA cannot start, so what runs is read back
    from ``session.get_providers()``, never assumed from what was asked.

    Graphs of format-2 bundles read their weights from ``*.weights`` files next to them (ONNX external data,
    which onnxruntime resolves relative to the graph file, so ``path`` is passed as a path, never as bytes); the
    few weights they derive from stored ones (Transpose / Concat / Cast, export/pack.py) are constant-folded
    here, once, at any ``optimization`` but ``disable`` (which would compute them on every run).

    ``shared_arena``: a CPU-only session allocates from the process's one shared arena (above) rather than an arena
    of its own. Sessions on CUDA keep onnxruntime's default allocators.

    ``tables``: a CPU-only session reads its lookup tables (the embedding) from these shared memory maps
    (shared_tables.py) rather than mapping them itself.

    ``memory_pattern``, ``prepack``: onnxruntime's memory pattern (one block per run for the intermediate tensors,
    planned from earlier runs of the same shapes) and weight prepacking (products' weights copied once into the
    kernels' layout), both on by default in onnxruntime; off for A/B runs of their memory and time.

    ``model``: the bytes of a graph derived from the file ``path`` (fused_step.py), whose external weights are still
    resolved in ``path``'s folder; ``custom_ops``: a library of custom operators it needs, registered first.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = inter_op_threads
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[optimization]
    options.log_severity_level = 3
    options.enable_mem_pattern = memory_pattern
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    providers = requested_providers(choice)
    # onnxruntime fuses Add + LayerNormalization into SkipLayerNormalization, whose CPU kernel measured 4-6x
    # slower than the two ops on this project's shapes (docs/engine-speed-log.md); CUDA keeps the fusion
    disabled = ["SkipLayerNormFusion"] if providers == ["CPUExecutionProvider"] else []
    if shared_arena and providers == ["CPUExecutionProvider"]:
        register_shared_cpu_arena()
        options.add_session_config_entry(USE_ENV_ALLOCATORS, "1")
    if tables is not None and providers == ["CPUExecutionProvider"]:
        for name, value in tables.for_graph(path).items():
            options.add_initializer(name, value)
    if custom_ops is not None:
        options.register_custom_ops_library(str(custom_ops))
    if model is not None:
        options.add_session_config_entry(EXTERNAL_FOLDER, str(Path(path).parent))
    source = str(path) if model is None else model
    session = ort.InferenceSession(source, sess_options=options, providers=providers, disabled_optimizers=disabled)
    actual = session.get_providers()
    if choice == "cuda" and "CUDAExecutionProvider" not in actual:
        raise ProviderError(f"{path.name}: CUDA was requested but the session runs on {actual}")
    if (
        choice == "auto"
        and "CUDAExecutionProvider" in ort.get_available_providers()
        and actual[0] != "CUDAExecutionProvider"
    ):
        log.warning("CUDA is available but did not initialise for %s; running on %s", path.name, actual)
    return session
