"""What a fused decoder step would buy: speed-log item 43, the sizing of issue 33's last lever.

    python -m bench.experiments.fused_step --bundle model_repository/de-en/3 --data ../shared/data/multi30k \
        [--ct2 build/ct2/general] [--sentences 200] [--batched 1000] [--repeats 3] [--amx-rows 8]

The engine's search runs ~150 onnxruntime nodes a step. fused_step.c computes the same step (the model's shape from
the bundle's manifest: pre-norm layers, u8 x s8 products with a scale per column, attention over a cache written in
place, log-softmax and arg-max over the output rows) as one C call for any number of rows, with random weights: it
times a step, it translates nothing. It is compiled here with the system's C compiler (``cc -O3 -march=native
-ffast-math``, linked without -ffast-math); products use AMX tiles from --amx-rows rows where the CPU and kernel
allow, AVX-512 VNNI below that, plain loops on CPUs without VNNI.

Two settings, greedy, no n-gram block, int8, one thread, each with the bundle's shortlist and with the whole
vocabulary: ``greedy b1``, the first --sentences of --split each alone (the search loop graph); ``greedy b32``, the
first --batched sorted by length in batches of 32 (the whole-batch search, which drops rows as they end). For each:
the engine's CPU time split into encoder, subset and search; then the C steps for as many rows and steps as each
search took (over the median subset's number of output rows: one C model per setting and vocabulary); then, with
--ct2, CTranslate2 int8 on the same batches (with its vmap where ours has the shortlist). Medians of --repeats
interleaved timings after a warm-up. The estimate adds the engine's own encoder and subset to the C steps: what the
engine would cost with only its step fused.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.harness import machine, now

SOURCE = Path(__file__).with_name("fused_step.c")
# the products: the fused operator's header (native/fused_step/), shared with it
PRODUCTS = Path(__file__).resolve().parents[2] / "native" / "fused_step"


def c_compiler() -> str | None:
    """The system's C compiler (cc, gcc or clang on PATH), None without one."""
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def compile_library(out_dir: Path) -> ctypes.CDLL:
    """fused_step.c built for this CPU and loaded; RuntimeError when no C compiler is installed."""
    compiler = c_compiler()
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH: the fused step is C")
    obj, library = out_dir / "fused_step.o", out_dir / "fused_step.so"
    # compiled with -ffast-math (vectorized exponentials) but linked without it: linking with it adds crtfastmath,
    # whose constructor turns on flush-to-zero for the whole process that loads the library (onnxruntime's and
    # numpy's arithmetic included)
    compile_cmd = [compiler, "-O3", "-march=native", "-ffast-math", "-fPIC", "-I", str(PRODUCTS), "-c", "-o", str(obj)]
    compile_cmd.append(str(SOURCE))
    subprocess.run(compile_cmd, check=True, capture_output=True, text=True)
    subprocess.run(
        [compiler, "-shared", "-o", str(library), str(obj), "-lm"], check=True, capture_output=True, text=True
    )
    lib = ctypes.CDLL(str(library))
    lib.fs_create.restype = ctypes.c_void_p
    lib.fs_create.argtypes = [ctypes.c_int] * 9 + [ctypes.c_uint]
    lib.fs_run.restype = ctypes.c_int
    lib.fs_run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.fs_free.argtypes = [ctypes.c_void_p]
    lib.fs_set_amx_rows.argtypes = [ctypes.c_int]
    lib.fs_qgemm.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.fs_qgemm.argtypes += [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p]
    return lib


def qgemm(lib: ctypes.CDLL, x: np.ndarray, w: np.ndarray, scale: np.ndarray, bias: np.ndarray, x_scale: float):
    """The C step's u8 x s8 product: x (rows, k) float32, w (k, n) int8, scale and bias (n,) float32 -> (rows, n)."""
    x, w = np.ascontiguousarray(x, np.float32), np.ascontiguousarray(w, np.int8)
    scale, bias = np.ascontiguousarray(scale, np.float32), np.ascontiguousarray(bias, np.float32)
    y = np.empty((x.shape[0], w.shape[1]), np.float32)
    lib.fs_qgemm(x.ctypes, w.ctypes, w.shape[0], w.shape[1], x.shape[0], scale.ctypes, bias.ctypes, x_scale, y.ctypes)
    return y


class FusedStep:
    """One C model of the bundle's shape over ``vocab_rows`` output rows, for up to ``max_rows`` rows a step."""

    def __init__(self, lib: ctypes.CDLL, cfg: dict, vocab_rows: int, max_rows: int, max_src: int) -> None:
        self.lib = lib
        shape = (cfg["d_model"], cfg["n_heads"], cfg["d_ff"], cfg["n_decoder_layers"], cfg["vocab_size"])
        self.handle = lib.fs_create(*shape, vocab_rows, cfg["max_positions"], max_src, max_rows, 1)

    def search(self, src_len: int, steps: list[int]) -> None:
        """The steps of a greedy search whose sentences took ``steps`` steps each (rows drop out as they end)."""
        alive = np.array([sum(1 for s in steps if s > t) for t in range(max(steps))], dtype=np.int32)
        self.lib.fs_run(self.handle, src_len, alive.ctypes, len(alive))

    def close(self) -> None:
        self.lib.fs_free(self.handle)


def engine_search(engine, batch: list[list[int]], options) -> tuple[float, float, float, list[int], list[list[int]]]:
    """(CPU s of the encoder, of the shortlist's subset, of the search, steps per sentence, answers) for one batch,
    greedy: a lone sentence in the search loop graph, a batch in the whole-batch search (which takes its subset
    again)."""
    started = time.process_time()
    enc = engine.run_encoder(batch)
    encoded = time.process_time()
    vocab_ids = engine.vocab_subset(batch, options)
    subset = time.process_time()
    limits = length_limits_of(engine, batch)
    if len(batch) == 1:
        found = [engine.search_loop.search(enc, limits[0], 1, options.length_penalty, 1, vocab_ids, 0)[0]]
    else:
        found = [h[0] for h in engine._decode(enc, batch, options)]
    searched = time.process_time()
    steps = [min(len(h.tokens) + 1, limit) for h, limit in zip(found, limits, strict=True)]  # + the EOS step
    return encoded - started, subset - encoded, searched - subset, steps, [list(h.tokens) for h in found]


def length_limits_of(engine, batch: list[list[int]]) -> list[int]:
    """The engine's output length limit of each source of ``batch`` (no max_length asked)."""
    from core.search import length_limits

    return length_limits([len(ids) for ids in batch], engine.max_source_tokens, None)


PARTS = ("encoder", "subset", "search", "fused", "ct2")


def measure(settings: dict, engines: dict, fused: dict, ct2: dict, options, repeats: int) -> tuple[dict, dict]:
    """{(setting, vocabulary, part): CPU s per repeat}, {(setting, vocabulary): (tokens, row-steps, CTranslate2's
    tokens)}; every repeat runs every setting, the engine then the C steps then CTranslate2, after a warm-up round.
    RuntimeError when the engine's answers change from one round to the next (the C library sharing the process,
    its AMX tiles included, must leave onnxruntime's results alone)."""
    timings: dict[tuple[str, str, str], list[float]] = {}
    counts: dict[tuple[str, str], tuple[int, int, int]] = {}
    answers: dict[tuple[str, str], list[list[int]]] = {}
    for repeat in range(repeats + 1):
        for setting, batches in settings.items():
            for name, engine in engines.items():
                key = (setting, name)
                parts = np.zeros(4)  # encoder, subset, search, fused steps
                n_steps, ct2_tokens, outputs = 0, 0, []
                for batch in batches:
                    encoder, subset, search, steps, found = engine_search(engine, batch, options)
                    started = time.process_time()
                    fused[key].search(max(len(ids) for ids in batch), steps)
                    parts += (encoder, subset, search, time.process_time() - started)
                    n_steps, outputs = n_steps + sum(steps), outputs + found
                if answers.setdefault(key, outputs) != outputs:
                    raise RuntimeError(f"{key}: the engine's answers changed between rounds")
                tokens = sum(len(o) for o in outputs)
                ct2_s = float("nan")
                if name in ct2:
                    started = time.process_time()
                    for batch in batches:
                        out = ct2[name].translate_ids(batch, length_limits_of(engine, batch), 1)
                        ct2_tokens += sum(len(o) for o in out)
                    ct2_s = time.process_time() - started
                if repeat:  # the first round warms up
                    for part, value in zip(PARTS, (*parts, ct2_s), strict=True):
                        timings.setdefault((*key, part), []).append(value)
                    counts[key] = (tokens, n_steps, ct2_tokens)
    return timings, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="folder with <split>.de")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--sentences", type=int, default=200, help="the first N of --split, alone")
    parser.add_argument("--batched", type=int, default=1000, help="the first N of --split in batches of 32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ct2", type=Path, help="the bundle's model converted for CTranslate2 (bench/ct2_convert.py)")
    parser.add_argument(
        "--amx-rows",
        type=int,
        default=8,
        help="C products of at least this many rows on AMX tiles, where granted (0: never)",
    )
    args = parser.parse_args(argv)

    from core.bundle import load_bundle
    from service.engine import Engine, TranslateOptions

    bundle = load_bundle(args.bundle)
    cfg = bundle.manifest["model"]
    lines = (args.data / f"{args.split}.de").read_text(encoding="utf-8").splitlines()
    options = TranslateOptions(beam_size=1, no_repeat_ngram_size=0)
    engines = {
        "shortlist": Engine(bundle, "int8", "cpu", intra_op_threads=1, shortlist=True),
        "whole vocabulary": Engine(bundle, "int8", "cpu", intra_op_threads=1, shortlist=False),
    }
    if engines["shortlist"].vocab_subset(engines["shortlist"].source_ids(lines[:1]), options) is None:
        print(f"{args.bundle} has no shortlist", file=sys.stderr)
        return 2
    alone = [[ids] for ids in engines["shortlist"].source_ids(lines[: args.sentences])]
    batched = sorted(engines["shortlist"].source_ids(lines[: args.batched]), key=len)
    settings = {"greedy b1": alone, "greedy b32": [batched[i : i + 32] for i in range(0, len(batched), 32)]}
    subset_rows = {  # the C model's output rows: the median subset of the setting's batches
        setting: int(np.median([len(engines["shortlist"].vocab_subset(b, options)) for b in batches]))
        for setting, batches in settings.items()
    }
    ct2 = {}
    if args.ct2:
        from bench.ct2_convert import CT2Runner, vmap_model

        pieces = json.loads((args.ct2 / "shared_vocabulary.json").read_text(encoding="utf-8"))
        ct2["whole vocabulary"] = CT2Runner(args.ct2, pieces, compute_type="int8", threads=1)
        ct2["shortlist"] = CT2Runner(
            vmap_model(args.ct2, args.bundle), pieces, compute_type="int8", threads=1, use_vmap=True
        )

    with tempfile.TemporaryDirectory() as tmp:
        lib = compile_library(Path(tmp))
        lib.fs_set_amx_rows(args.amx_rows)
        max_src = max(len(ids) for batches in settings.values() for batch in batches for ids in batch)
        fused = {
            (setting, name): FusedStep(lib, cfg, rows if name == "shortlist" else cfg["vocab_size"], 32, max_src)
            for setting, rows in subset_rows.items()
            for name in engines
        }
        try:
            timings, counts = measure(settings, engines, fused, ct2, options, args.repeats)
        finally:
            for model in fused.values():
                model.close()
        kernels = "AVX-512 VNNI" if lib.fs_has_vnni() else "plain loops"
        if args.amx_rows > 0 and lib.fs_has_amx():
            kernels += f", AMX tiles from {args.amx_rows} rows"

    print(f"# A fused decoder step, sized ({now()})\n")
    print(f"- machine: {machine()}; products in C: {kernels}")
    print(
        f"- {args.bundle}, int8, greedy, no n-gram block, one thread; b1: the first {len(alone)} sentences of "
        f"{args.split}, each alone (the search loop graph); b32: the first {len(batched)} sorted by length in batches "
        f"of 32 (the whole-batch search, rows dropped as they end); medians of {args.repeats} interleaved timings "
        "after a warm-up, process CPU time; tok = output tokens (EOS excluded), steps = row-steps\n"
    )
    print(
        "| setting | vocabulary (output rows) | engine search, ms per row-step | fused C step, ms per row-step | "
        "C / engine | engine tok/CPU-s | engine with the step fused (estimate) | CTranslate2 tok/CPU-s | "
        "estimate / CTranslate2 | engine / CTranslate2 | encoder + subset in the estimate |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for setting in settings:
        for name in engines:
            med = {part: statistics.median(timings[(setting, name, part)]) for part in PARTS}
            tokens, n_steps, ct2_tokens = counts[(setting, name)]
            rows = subset_rows[setting] if name == "shortlist" else cfg["vocab_size"]
            # the whole-batch search takes its subset itself: the engine's own time is encoder + search there
            engine_s = med["encoder"] + med["search"] + (med["subset"] if setting == "greedy b1" else 0.0)
            fused_s = med["encoder"] + med["subset"] + med["fused"]
            engine_rate, fused_rate = tokens / engine_s, tokens / fused_s
            ct2_cells = "- | - | -"  # without --ct2
            if name in ct2:
                ct2_rate = ct2_tokens / med["ct2"]
                ct2_cells = f"{ct2_rate:,.0f} | {fused_rate / ct2_rate:.2f}x | {engine_rate / ct2_rate:.2f}x"
            print(
                f"| {setting} | {name} ({rows:,}) | {1e3 * med['search'] / n_steps:.3f} | "
                f"{1e3 * med['fused'] / n_steps:.3f} | {med['fused'] / med['search']:.2f}x | {engine_rate:,.0f} | "
                f"{fused_rate:,.0f} | {ct2_cells} | {(med['encoder'] + med['subset']) / fused_s:.0%} |"
            )
    print(
        "\nThe C step's weights are random and its output rows fixed at the setting's median subset: it sizes a fused "
        "step's time, not a translation. The estimate keeps the engine's own encoder and subset; the C search drops "
        "finished rows without copying caches (the engine's gather of the rows that go on is not in it)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
