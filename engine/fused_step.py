"""The fused decoder step: the int8 whole-batch step graph as one custom onnxruntime operator (issue 33).

``native/fused_step/fused_step_op.c`` computes the step graph's ~150 nodes in one call (u8 x s8 products on AVX-512 VNNI
or AMX tiles, AVX-VNNI or AVX2 on CPUs without AVX-512, all exact integer sums; attention over the cache, norms,
log-softmax, top-k); ``engine/fused_step_graph.py`` rewrites a bundle's ``int8.decoder_step_batch.onnx`` into a model of
that one node over the same weights, the search loop graph's body likewise, and the search loop graph's whole Loop into
one search operator (the same step, the Loop body's ranking, a cache written in place). ``fused_step_session`` /
``fused_loop_session`` / ``fused_search_session`` open them when the library is built (``make native``;
MT_FUSED_STEP_LIBRARY names another file) and say why not otherwise: the engine then keeps the graphs the bundle ships
(a fallback, never an error).

MT_FUSED_STEP=auto (the default) uses it where it was measured faster: the library is built and the CPU has AVX-512
VNNI, or AVX2 with FMA (its AVX2 and AVX-VNNI kernels, docs/engine-speed-log.md item 55; ``auto_blocker`` says why
not otherwise; the graphs then run, with an info line, not a warning). true asks for it on any CPU (plain loops on
one with neither), false never. Its float parts (softmax
exponentials, dot-product order) are not onnxruntime's bit for bit, so a quantized activation on a rounding edge can
round the other way and a hypothesis' score move by a few hundredths (docs/engine-speed-log.md items 45 and 48 have the
measured agreement and BLEU).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import onnxruntime as ort

from core.cpu import cpu_flags
from engine.fused_step_graph import NOT_COMPUTED, fused_loop_graph, fused_search_graph, fused_step_graph
from engine.runtime import create_session

log = logging.getLogger(__name__)

LIBRARY_ENV = "MT_FUSED_STEP_LIBRARY"
DEFAULT_LIBRARY = Path(__file__).resolve().parents[1] / "build" / "native" / "libmtserve_fused_step.so"


def library_path() -> Path:
    """Where the operator's library is looked for: MT_FUSED_STEP_LIBRARY, else build/native/ of this checkout."""
    return Path(os.environ.get(LIBRARY_ENV) or DEFAULT_LIBRARY)


def auto_blocker(flags: set[str] | None = None) -> str | None:
    """Why MT_FUSED_STEP=auto keeps the graphs on this machine, or None when it uses the fused step: the library is
    built and the CPU has AVX-512 VNNI or AVX2 with FMA, where its kernels were measured faster (docs/benchmarks.md;
    on AVX2 against CTranslate2's AVX2 code, which onnxruntime's graphs only matched on an AVX2-only EPYC, issue 56)
    and where they give each request its answer alone under any load (item 54). A CPU with neither would run plain
    loops, several times slower than onnxruntime's kernels."""
    library = library_path()
    if not library.is_file():
        return f"{library} is not built (make native)"
    flags = cpu_flags() if flags is None else flags
    if "avx512_vnni" not in flags and not {"avx2", "fma"} <= flags:
        return (
            "this CPU has neither AVX-512 VNNI nor AVX2 with FMA: the fused step would run plain loops, slower than "
            "onnxruntime's kernels (MT_FUSED_STEP=true uses them anyway)"
        )
    return None


def _fused_session(path: Path, rewrite, providers: str, settings: dict) -> tuple[ort.InferenceSession | None, str]:
    if providers == "cuda" or (providers == "auto" and "CUDAExecutionProvider" in ort.get_available_providers()):
        return None, "the fused step runs on the CPU only"
    library = library_path()
    if not library.is_file():
        return None, f"{library} is not built (make native)"
    try:
        model = rewrite(path)
    except (ValueError, OSError) as e:  # NotFused, or a graph file the wire reader cannot read
        return None, f"{path.name}: {e}"
    try:
        session = create_session(path, "cpu", **settings, model=model, custom_ops=library)
    except Exception as e:  # noqa: BLE001 - a library built for another onnxruntime or CPU: keep the graph
        return None, f"{library.name} did not load: {e}"
    return session, "fused"


def fused_step_session(path: Path, providers: str, settings: dict) -> tuple[ort.InferenceSession | None, str]:
    """A session of the fused step for the whole-batch step graph file ``path``, or (None, why not)."""
    return _fused_session(path, fused_step_graph, providers, settings)


def fused_loop_session(path: Path, providers: str, settings: dict) -> tuple[ort.InferenceSession | None, str]:
    """A session of the search loop graph file ``path`` with its body's step fused, or (None, why not)."""
    return _fused_session(path, fused_loop_graph, providers, settings)


def fused_search_session(path: Path, providers: str, settings: dict) -> tuple[ort.InferenceSession | None, str]:
    """A session of the search loop graph file ``path`` with its whole Loop one fused search operator (the step and
    the ranking in C over a cache written in place), or (None, why not)."""
    return _fused_session(path, fused_search_graph, providers, settings)


def batch_step_session(
    path: Path, fused_step: bool | str, providers: str, settings: dict, label: str
) -> tuple[ort.InferenceSession, str]:
    """The whole-batch search's step session of the graph at ``path`` and what runs: "fused" (MT_FUSED_STEP true, or
    auto where ``auto_blocker`` finds nothing against it), "off", or why not (the graph's session then). Auto's
    reasons are told at DEBUG (the usual case on a CPU without AVX2 or a build without `make native`, and a graph
    the fused step is not for, an fp32 variant; GET /v1/models says why), a failure at INFO under auto and at
    WARNING when the fused step was asked for."""
    auto = fused_step == "auto"
    blocker = auto_blocker() if auto else None
    session, state = None, "off"
    if blocker is not None:
        state = blocker
        log.debug("%s: fused step not used (MT_FUSED_STEP=auto): %s", label, blocker)
    elif fused_step in (True, "true", "auto"):
        session, state = fused_step_session(path, providers, settings)
        if session is None:
            # under auto, a graph the fused step is not for (fp32 and fp16 variants) is the usual case, not news
            level = logging.WARNING if not auto else logging.DEBUG if NOT_COMPUTED in state else logging.INFO
            log.log(level, "%s: fused step not used: %s", label, state)
        else:
            log.info("%s: whole-batch search on the fused step", label)
    if session is None:
        session = create_session(path, providers, **settings)
    return session, state
