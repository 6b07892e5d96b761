"""Engine benchmark: PyTorch eager reference vs our onnxruntime engine vs CTranslate2, same weights, one run.

    nice -n 10 python -m bench.engine --data ../shared/data/multi30k \
        [--model checkpoints/de-en] [--bundle model_repository/de-en/1] [--ct2 build/ct2/de-en]

An imported bundle (``python -m export.cli import-hf`` / ``import-argos``) runs against the CTranslate2 model it came
from (``--ct2``: never converted here) with ``--engines ort-fp32 ort-int8 ct2-fp32 ct2-int8`` (no ``pytorch``: the
reference is then ort-fp32); bench/marian_random.py makes such a pair of OPUS-MT's shape (docs/serve-opus-mt.md).

Engines: ``pytorch`` (model.decoding greedy / beam with the key/value cache, fp32), ``ort-fp32`` /
``ort-int8`` (engine.Engine on the bundle's variants), ``ct2-fp32`` / ``ct2-int8`` (CTranslate2
on the converted checkpoint, see bench/ct2_convert.py). Append ``+decoder`` to an ort engine to search with
decoder.onnx instead of the lean decoder_step.onnx, ``+own-arena`` to give each of its sessions an arena of its own
instead of the process's shared one (for A/B runs), ``+own-tables`` to let each session map the embedding itself
instead of sharing one map (engine/shared_tables.py; for A/B runs), ``+no-pattern`` / ``+no-prepack`` to
turn off onnxruntime's memory pattern / weight prepacking in its sessions (A/B runs), ``+steps`` to search a lone
sentence step by step in Python where the bundle has a search loop graph (export/search_loop.py; batch 1),
``+no-split`` to rank every row of the fused search over the batch's whole shortlist product (MT_FUSED_STEP_SPLIT=0),
``+no-tiles`` to run the fused step's AVX-512 VNNI products on 4-row x 16-column tiles (MT_FUSED_STEP_TILES=0),
``+block`` to
search with a 4-gram block (``no_repeat_ngram_size`` 4, the general-domain bundles' default; every other ort engine
searches without one, as PyTorch and CTranslate2 do). The bundle's lexical
shortlist (``python -m export.cli shortlist``, core/shortlist.py) runs only in the ``+shortlist`` ort engines and
the ``+vmap`` ct2 engines (the same table written as CTranslate2's vmap.txt, decoded with use_vmap); every other
engine searches the whole vocabulary. ``+avx2`` runs an engine on the code of CPUs without AVX-512: the fused step's
AVX2 kernels (MT_FUSED_STEP_KERNEL=avx2; use with ``+fused``) and CTranslate2's AVX2 code (CT2_FORCE_CPU_ISA=AVX2 for
its own kernels, ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2 for its int8 GEMM backends).
onnxruntime's own kernels cannot be forced, so on an AVX-512 machine ``ort-int8+fused+avx2`` against
``ct2-int8+avx2`` is the one like-for-like AVX2 pair; the graph engines need an AVX2-only CPU.

Method: every engine lives in its own fresh process (its own peak RSS), all get the same token ids
(tokenisation is outside the timing), the same thread count and the same batches (batch 32: the test set
sorted by source length; batch 1: the first --batch1-limit sentences). Before timing, every engine
translates the greedy batch-32 workload once (warm-up); CTranslate2 fp32 must then match the PyTorch
reference on >= 99% of sentences (token ids), or the run stops. Timed repeats are interleaved (repeat r
of every engine and setting before repeat r + 1) and the median is reported, both as wall-clock time
and as the process's CPU time: on a shared machine CPU time is the steadier measure of an engine's work.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import machine, now, write_section

ROOT = Path(__file__).resolve().parent.parent

SETTINGS = [("greedy", 1, 32), ("greedy", 1, 1), ("beam4", 4, 32), ("beam4", 4, 1)]  # (name, beam, batch)
ENGINES = ["pytorch", "ort-fp32", "ort-int8", "ct2-fp32", "ct2-int8"]
SHORTLIST_ENGINES = ["ort-fp32+shortlist", "ort-int8+shortlist", "ct2-fp32+vmap", "ct2-int8+vmap"]
SECTION = "bench/engine.py"  # markers of this script's section in docs/benchmarks.md
MIN_AGREEMENT = 0.99


# --- worker processes --------------------------------------------------------------------------------
def _runner(engine: str, args: dict):
    """A function (sources, limits, beam) -> best hypotheses' token ids (EOS excluded)."""
    threads = args["threads"]
    if engine == "pytorch":
        import torch

        from model.checkpoint import load_release
        from model.data import pad
        from model.decoding import beam_search, greedy_search

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        model, _ = load_release(args["model"])

        @torch.no_grad()
        def run(sources, limits, beam):
            src = pad(sources)
            if beam == 1:
                return [h.tokens for h in greedy_search(model, src)]
            return [nb[0].tokens for nb in beam_search(model, src, beam)]

        return run
    if engine.startswith("ort-"):
        from core.bundle import load_bundle
        from engine import Engine
        from engine.decoding import DecodingDefaults, TranslateOptions

        variant = engine.split("-")[1].split("+")[0]
        extra = {"lean_decoder": False} if "+decoder" in engine else {}  # older engines lack the options
        if "+own-arena" in engine:  # each session with an arena of its own (before item 15 of the speed log)
            extra["shared_arena"] = False
        if "+own-tables" in engine:  # each session maps the embedding itself (before item 30 of the speed log)
            extra["shared_tables"] = False
        if "+no-pattern" in engine:  # onnxruntime's memory pattern off (speed-log item 31)
            extra["memory_pattern"] = False
        if "+no-prepack" in engine:  # onnxruntime's weight prepacking off (speed-log item 31)
            extra["prepack"] = False
        if "+steps" in engine:  # a lone sentence step by step in Python, not in the search loop graph
            extra["search_loop"] = False
        if "+fused" in engine:  # the int8 step as one fused operator (engine/fused_step.py, item 45)
            extra["fused_step"] = True
        if "shortlist" in load_bundle(args["bundle"]).manifest:  # the whole vocabulary unless +shortlist
            extra["shortlist"] = "+shortlist" in engine
        ort_engine = Engine(load_bundle(args["bundle"]), variant, "cpu", intra_op_threads=threads, **extra)
        ort_engine.decoding.pop("max_length", None)  # an imported default: every engine gets length_limits' limits
        ort_engine.defaults = DecodingDefaults.of(ort_engine.decoding)  # what resolve() fills in

        def run(sources, limits, beam):
            # no n-gram block (a bundle's default may have one): the same search as PyTorch's and CTranslate2's;
            # +block: the 4-gram block the general-domain bundles serve by default (its cost)
            block = 4 if "+block" in engine else 0  # CTranslate2's length penalty (CT2Runner's): 0.6
            options = TranslateOptions(beam_size=beam, length_penalty=0.6, no_repeat_ngram_size=block)
            return [t.token_ids for t in ort_engine.translate_ids(sources, options)]

        return run
    if engine.startswith("ct2-"):
        from bench.ct2_convert import CT2Runner

        ct2_dir = Path(args["ct2"])
        pieces = json.loads((ct2_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
        manifest = json.loads((Path(args["bundle"]) / "manifest.json").read_text())
        extra = imported_twin(manifest, pieces) if "imported" in manifest else {"pieces": pieces}
        base, *options = engine.split("+")
        compute_type = {"ct2-fp32": "float32", "ct2-int8": "int8"}[base]
        if "vmap" in options:
            from bench.ct2_convert import vmap_model

            ct2_dir = vmap_model(ct2_dir, Path(args["bundle"]))
        runner = CT2Runner(ct2_dir, compute_type=compute_type, threads=threads, use_vmap="vmap" in options, **extra)
        return lambda sources, limits, beam: runner.translate_ids(sources, limits, beam)
    raise ValueError(
        f"unknown engine {engine!r}; choose from {ENGINES} (ort engines accept +decoder, +own-arena, +shortlist, "
        "+steps, +block, +own-tables, +no-pattern, +no-prepack, +fused, +no-split, +no-tiles, +avx2; ct2 engines "
        "+vmap, +avx2)"
    )


def imported_twin(manifest: dict, ct2_pieces: list[str]) -> dict:
    """CT2Runner's arguments for an imported bundle and the CTranslate2 model it came from (or was converted from the
    same checkpoint, bench/marian_random.py): CTranslate2's piece of each of our ids (the manifest's vocabulary rows:
    ``rows`` of an Argos import, ``marian_ids`` of a Hugging Face one, whose pad row CTranslate2 drops), our id of each
    piece (never one the bundle excludes), and whether the sources' EOS is passed."""
    vocabulary = manifest["imported"]["vocabulary"]
    rows = vocabulary.get("rows") or vocabulary["marian_ids"]
    pieces = [ct2_pieces[r] if r < len(ct2_pieces) else "<pad>" for r in rows]
    excluded = set(vocabulary["excluded"])
    index: dict[str, int] = {}
    for our_id, piece in enumerate(pieces):
        if our_id not in excluded:
            index.setdefault(piece, our_id)
    return {"pieces": pieces, "index": index, "source_eos": manifest["model"].get("source_eos", True)}


def _worker(conn, engine: str, args: dict) -> None:
    if "+avx2" in engine:  # before any library reads them: the fused step's kernel, CTranslate2's ISA
        os.environ["MT_FUSED_STEP_KERNEL"] = "avx2"
        os.environ["CT2_FORCE_CPU_ISA"] = "AVX2"
        # CT2_FORCE_CPU_ISA is CTranslate2's own kernels only: its int8 GEMM is oneDNN's (AMD) or MKL's (Intel),
        # which pick their own ISA (AVX-512 VNNI otherwise, speed-log item 55)
        os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"
        os.environ["MKL_ENABLE_INSTRUCTIONS"] = "AVX2"
    if "+no-split" in engine:  # the fused search ranks every row over the batch's whole subset (speed-log item 57)
        os.environ["MT_FUSED_STEP_SPLIT"] = "0"
    if "+no-tiles" in engine:  # the fused step's VNNI products on 4 x 1 tiles, as before item 57
        os.environ["MT_FUSED_STEP_TILES"] = "0"
    started = time.perf_counter()
    run = _runner(engine, args)
    workloads: dict[str, dict] = {}
    conn.send({"loaded_s": time.perf_counter() - started, "rss_mib": _peak_rss_mib()})
    while True:
        msg = conn.recv()
        if msg[0] == "load":
            workloads = msg[1]
            conn.send(True)
        elif msg[0] == "run":
            w = workloads[msg[1]]
            wall, cpu = time.perf_counter(), time.process_time()
            outputs = [h for b, lim in zip(w["batches"], w["limits"], strict=True) for h in run(b, lim, w["beam"])]
            conn.send({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "outputs": outputs})
        else:
            conn.send({"peak_rss_mib": _peak_rss_mib()})
            return


def _peak_rss_mib() -> float:
    """This process's own peak resident memory. /proc's VmHWM belongs to the process's current memory map; the
    rusage maximum survives exec, so a worker spawned from a large parent (one that had just converted the
    CTranslate2 model with torch) would report the parent's size."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- driver --------------------------------------------------------------------------------------------
def workloads(ids: list[list[int]], limits: list[int], batch1_limit: int) -> dict[str, dict]:
    """{setting: beam, batches, per-batch limits, index (sentence of each output)}.

    Batch 32 runs over the whole set sorted by source length; batch 1 over the first ``batch1_limit``.
    """
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = {}
    for name, beam, batch in SETTINGS:
        chosen = order if batch > 1 else list(range(min(batch1_limit, len(ids))))
        chunks = [chosen[s : s + batch] for s in range(0, len(chosen), batch)]
        out[f"{name}/b{batch}"] = {
            "beam": beam,
            "batches": [[ids[i] for i in c] for c in chunks],
            "limits": [[limits[i] for i in c] for c in chunks],
            "index": chosen,
        }
    return out


def background_load() -> str:
    """Processes other than this benchmark using CPU, as a note for the results (ps's %CPU: over each process's
    life). A stopped process (state T: a training run paused for the measurement) uses none and is left out."""
    try:
        out = subprocess.run(["ps", "-eo", "pid,ni,pcpu,stat,comm", "--sort=-pcpu"], capture_output=True, text=True)
    except OSError:
        return "unknown"
    me = {os.getpid(), *(c.pid for c in mp.active_children())}
    rows = []
    for line in out.stdout.splitlines()[1:]:
        pid, ni, pcpu, stat, comm = line.split(None, 4)
        if int(pid) not in me and float(pcpu) >= 20 and not stat.startswith("T"):
            rows.append(f"{comm} (nice {ni}, {pcpu}% CPU)")
    return ", ".join(rows[:4]) or "none above 20% CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.engine", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", required=True, help="corpus folder with <split>.<src> and <split>.<tgt>")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--model", default="checkpoints/de-en", help="the pytorch engine's (and a conversion's) model")
    parser.add_argument("--bundle", default="model_repository/de-en/1")
    parser.add_argument("--ct2", default="build/ct2/de-en", help="CTranslate2 model folder (converted if missing)")
    parser.add_argument(
        "--engines",
        nargs="+",
        help=f"default: {' '.join(ENGINES)}, and {' '.join(SHORTLIST_ENGINES)} when the bundle has a shortlist",
    )
    parser.add_argument("--settings", nargs="+", help="subset of " + " ".join(f"{n}/b{b}" for n, _, b in SETTINGS))
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every engine")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="use only the first N sentences (0 = all)")
    parser.add_argument("--batch1-limit", type=int, default=200, help="sentences translated one at a time")
    parser.add_argument("--output", default="docs/benchmarks.md", help="markdown file; '' = print only")
    parser.add_argument("--json", default="build/bench/engine.json", help="raw results")
    args = parser.parse_args(argv)

    from bench.bench_report import render, summarize
    from bench.flops import int8_gemm_rate, sgemm_rate

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    bundle = json.loads((Path(args.bundle) / "manifest.json").read_text())
    if not args.engines:
        args.engines = ENGINES + (SHORTLIST_ENGINES if "shortlist" in bundle else [])
    config = bundle["model"]
    src_lang, tgt_lang = bundle["source_language"], bundle["target_language"]
    data = Path(args.data)
    texts = (data / f"{args.split}.{src_lang}").read_text(encoding="utf-8").splitlines()
    refs = (data / f"{args.split}.{tgt_lang}").read_text(encoding="utf-8").splitlines()
    if args.limit:
        texts, refs = texts[: args.limit], refs[: args.limit]
    from core.search import length_limits
    from core.tokenizer import EOS_ID, Tokenizer

    tokenizer = Tokenizer(Path(args.bundle) / bundle["tokenizer"]["file"])
    ids = [t[: config["max_positions"] - 1] + [EOS_ID] for t in tokenizer.encode_batch(texts)]
    limits = length_limits([len(s) for s in ids], config["max_positions"])
    work = workloads(ids, limits, args.batch1_limit)
    keys = args.settings or list(work)
    if any(e.startswith("ct2") for e in args.engines) and not (Path(args.ct2) / "model.bin").exists():
        if "imported" in bundle:
            print(f"{args.ct2}: no CTranslate2 model; an imported bundle's twin comes with it", file=sys.stderr)
            return 2
        from bench.ct2_convert import convert

        convert(Path(args.model), Path(args.ct2))

    print(f"machine: {machine()}; background: {background_load()}", file=sys.stderr)
    ctx = mp.get_context("spawn")
    worker_args = {"model": args.model, "bundle": args.bundle, "ct2": args.ct2, "threads": args.threads}
    workers = {}
    for engine in args.engines:  # one at a time: loading does not overlap with anything else
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, engine, worker_args), daemon=True)
        proc.start()
        workers[engine] = (proc, parent, parent.recv())
        parent.send(("load", {k: work[k] for k in keys}))
        parent.recv()
    warm = keys[0]
    warm_outputs = {}
    for engine, (_, conn, _) in workers.items():
        conn.send(("run", warm))
        warm_outputs[engine] = conn.recv()["outputs"]
        print(f"warm-up {engine} {warm}: done", file=sys.stderr)
    agreement = {}
    reference = next((e for e in ("pytorch", "ort-fp32") if e in warm_outputs), None)  # an imported bundle: no pytorch
    if reference is not None:
        ref = warm_outputs[reference]
        for engine, outs in warm_outputs.items():
            agreement[engine] = sum(a == b for a, b in zip(ref, outs, strict=True)) / len(ref)
        print(f"greedy token-id agreement with {reference} ({warm}): {agreement}", file=sys.stderr)
        if "ct2-fp32" in agreement and agreement["ct2-fp32"] < MIN_AGREEMENT:
            print(
                f"CTranslate2 fp32 matches the {reference} reference on {agreement['ct2-fp32']:.2%} of sentences, "
                f"below {MIN_AGREEMENT:.0%}: the conversion does not run our model, so its timings would mean nothing.",
                file=sys.stderr,
            )
            return 1
    runs: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.repeats):
        for key in keys:
            for engine, (_, conn, _) in workers.items():
                conn.send(("run", key))
                result = conn.recv()
                runs.setdefault((engine, key), []).append(result)
                print(
                    f"repeat {r + 1} {engine:10s} {key:10s} wall {result['wall']:.2f}s cpu {result['cpu']:.2f}s",
                    file=sys.stderr,
                )
    peak = {}
    for engine, (proc, conn, _) in workers.items():
        conn.send(("stop",))
        peak[engine] = conn.recv()["peak_rss_mib"]
        proc.join()
    rates = {**sgemm_rate(args.threads), **int8_gemm_rate(args.threads)}
    rows = summarize(runs, work, ids, refs, tokenizer, config, peak, rates)
    meta = {
        "command": shlex.join(["python", "-m", "bench.engine", *(argv if argv is not None else sys.argv[1:])]),
        "date": now(),
        "machine": machine(),
        "background": background_load(),
        "threads": args.threads,
        "repeats": args.repeats,
        "agreement": agreement,
        "reference": reference,
        "imported": "imported" in bundle,
        "ct2": args.ct2,
        "sgemm": rates,
        "model": args.model,
        "bundle": args.bundle,
        "sentences": len(ids),
        "batch1_sentences": min(args.batch1_limit, len(ids)),
    }
    text = render(rows, meta, config)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    if args.output:
        write_section(Path(args.output), SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
