"""``python -m export.cli export | import-hf | import-argos | evaluate | verify | shortlist | decoding | compare |
tables``: build a bundle (from our checkpoint, a Hugging Face Marian checkpoint or an Argos Translate package:
export/import_commands.py), measure its BLEU, check parity, add a lexical shortlist learned from parallel text, set its
decoding defaults, compare two evaluation reports, print a report's markdown tables."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from core.bundle import FORMATS, load_bundle
from core.directions import DirectionError
from core.graphs import STEP_GRAPHS
from engine import Engine
from engine.decoding import TranslateOptions, decoding_defaults
from export.calibration import calibrate, read_sentences
from export.direction_scoring import direction_named, engine_in_direction, translate_split
from export.directions import directions_for
from export.float16_storage import FLOAT16_WEIGHTS, parameters
from export.import_commands import cmd_import_argos, cmd_import_hf
from export.manifest import build_manifest, git_commit, seal
from export.onnx_export import export_graphs
from export.pack import pack_bundle
from export.quantize import convert_fp16, convert_fp16_step, quantize_int8_static
from export.search_loop import add_search_loops
from export.shortlist import DEFAULTS
from model.checkpoint import TOKENIZER_FILE, load_release, round_to_float16

VARIANTS = ("fp32", "int8", "fp16")
MAX_BLEU_LOSS = 0.5  # a derived variant may be the default only within this much BLEU of fp32


def cmd_export(args: argparse.Namespace) -> int:
    if "int8" in args.variants and not args.calibration_data:
        print(
            "int8 needs --calibration-data: a text file of source-language sentences, one per line (the training "
            "split is fine), translated by the fp32 graphs to fix the int8 activation scales",
            file=sys.stderr,
        )
        return 2
    commit = git_commit()  # before anything is written: the bundle may live inside the repository
    model, meta = load_release(args.model)
    run = meta.get("run", {})
    storage = getattr(args, "float16_storage", False)
    if storage:  # the release is the model with float16 weights: every graph computes with exactly these
        round_to_float16(model)
    try:
        spec = getattr(args, "directions", None)  # callers that build the namespace (imports) may leave it out
        directions = directions_for(spec, Path(args.model) / TOKENIZER_FILE) if spec else None
    except DirectionError as exc:
        print(f"--directions: {exc}", file=sys.stderr)
        return 2
    first = next(iter(directions.values())) if directions else None  # the bundle's own pair: what old readers see
    source_language = args.source_language or (first.source if first else run.get("source_lang", "de"))
    if source_language == "src":
        print(
            f"{args.model} was trained on several source languages: name the bundle's with --source-language",
            file=sys.stderr,
        )
        return 2
    normalization = args.source_normalization
    prepared = Path(args.model) / "prepare.json"  # the data preparation of the run (model/prepare.py)
    if normalization is None and prepared.exists():
        normalization = json.loads(prepared.read_text()).get("rules", {}).get("normalization")
    out = Path(args.out)
    if out.exists():
        if not args.force:
            print(f"{out} exists; pass --force to replace it", file=sys.stderr)
            return 2
        shutil.rmtree(out)
    started = time.time()
    paths = export_graphs(model, out / "fp32", decoder_step=True)
    shutil.copy(Path(args.model) / TOKENIZER_FILE, out / TOKENIZER_FILE)
    training = {"run": run, "summary": meta.get("training", {}), "source_checkpoint": str(args.model)}
    if storage:
        training["weights"] = FLOAT16_WEIGHTS
    evaluation = Path(args.model) / "evaluation.json"
    if evaluation.exists():
        training["pytorch_evaluation"] = json.loads(evaluation.read_text())

    def sealed(variants: dict[str, dict], bundle_format: str) -> None:
        manifest = build_manifest(
            out,
            name=args.name,
            version=args.version,
            source_language=source_language,
            target_language=args.target_language or (first.target if first else run.get("target_lang", "en")),
            model_config=model.cfg.to_dict(),
            parameters=model.num_parameters(),
            variants=variants,
            vocab_size=model.cfg.vocab_size,
            source_normalization=normalization,
            directions=directions,
            training=training,
            commit=commit,
            bundle_format=bundle_format,
        )
        seal(out, manifest)

    # the variants are made as format 1 (self-contained graphs, one folder per variant), then packed (format 2)
    variants: dict[str, dict] = {"fp32": {graph: f"fp32/{graph}.onnx" for graph in paths}}
    sealed(variants, FORMATS[0])  # an fp32 bundle first: the engine that records the int8 calibration feeds loads it
    if "int8" in args.variants:
        sentences = read_sentences(args.calibration_data, args.calibration_sentences)
        print(f"calibrating int8 on {len(sentences)} sentences of {args.calibration_data}", file=sys.stderr)
        variants["int8"] = {}
        with tempfile.TemporaryDirectory(prefix="calibration-") as work:
            ranges = calibrate(out, sentences, paths, work)  # min/max as the feeds arrive: one feed held at a time
            for graph, path in paths.items():
                quantize_int8_static(path, out / "int8" / f"{graph}.onnx", ranges[graph])
                variants["int8"][graph] = f"int8/{graph}.onnx"
        variants["int8"]["quantization"] = {
            "method": "static",
            "weights": "int8 in 7 bits ([-64, 63]: exact products on CPUs without VNNI), symmetric, per output channel",
            "activations": "uint8, one scale per tensor fixed at export (min/max over the calibration feeds)",
            "quantized_ops": "MatMul with constant weights (projections); attention products, softmax and "
            "LayerNorm stay float",
            "calibration": {"file": Path(args.calibration_data).name, "sentences": len(sentences), "seed": 0},
            "batch_independent": True,
        }
    if "fp16" in args.variants:
        # decoder_step (contrib fused attention) through onnxruntime's converter: onnxconverter-common's leaves
        # the fused attention's outputs typed float and the graph does not load (export/quantize.py)
        variants["fp16"] = {}
        for graph, path in paths.items():
            convert = convert_fp16_step if graph in STEP_GRAPHS else convert_fp16
            convert(path, out / "fp16" / f"{graph}.onnx")
            variants["fp16"][graph] = f"fp16/{graph}.onnx"
    if args.bundle_format == 2:
        variants, report = pack_bundle(out, variants, float16_storage=parameters(model) if storage else None)
        for graph, counts in report.items():
            print(f"packed {graph}: {', '.join(f'{n} {kind}' for kind, n in sorted(counts.items()))}", file=sys.stderr)
        variants = add_search_loops(out, variants)  # read the packed weights files' regions
    sealed(variants, f"mtserve-bundle/{args.bundle_format}")
    print(f"wrote {out} ({', '.join(variants)}) in {time.time() - started:.1f}s", file=sys.stderr)
    return 0


def cmd_backtranslate(args: argparse.Namespace) -> int:
    """model/backtranslate.py through the engine: the bundle's direction (tagged as the service tags it), its
    decoding defaults (the n-gram block), whole batches, the fused int8 step where the CPU and `make native` allow."""
    from model.backtranslate import backtranslate
    from model.data import read_lines

    try:
        engine, direction = engine_in_direction(args.bundle, args.direction, args.variant, args.threads, args.providers)
    except DirectionError as exc:
        print(f"--direction: {exc}", file=sys.stderr)
        return 2
    options = engine.resolved(TranslateOptions(beam_size=args.beam))
    texts = read_lines(args.input)
    texts = texts[: args.limit] if args.limit else texts
    started = time.time()
    counts = backtranslate(
        lambda chunk: translate_split(engine, direction, chunk, options, args.batch_size)[0],
        texts,
        direction.name,
        args.out,
        progress=not args.no_progress,
    )
    print(json.dumps({**counts, "seconds": round(time.time() - started, 1), "fused_step": engine.fused_step}))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from model.data import read_parallel, split_language
    from model.directions import bleu_tokenizer
    from model.evaluate import bleu, score_line, write_hypotheses

    if args.fused_step and not args.no_seal:
        print("evaluate --fused-step scores only: add --no-seal (the manifest keeps the graphs')", file=sys.stderr)
        return 2
    bundle = load_bundle(args.bundle)
    manifest = bundle.manifest
    try:
        direction, own = direction_named(manifest, args.direction)
    except DirectionError as exc:
        print(f"--direction: {exc}", file=sys.stderr)
        return 2
    target, tokenize = direction.target, bleu_tokenizer(direction.name)
    splits = {}
    for split in args.split:
        source = split_language(args.data, split, direction.source, target)
        sources, references = read_parallel(args.data, split, source, target)
        if args.limit:  # a smoke run: scores of part of a split are printed, never sealed into the manifest
            sources, references = sources[: args.limit], references[: args.limit]
        splits[split] = (sources, references)
    report: dict[str, dict] = {}
    for variant in args.variants or bundle.variants:
        engine = Engine(
            bundle,
            variant=variant,
            providers=args.providers,
            intra_op_threads=args.threads,
            shortlist=not args.no_shortlist,
            fused_step=args.fused_step,
        )
        if args.fused_step and engine.fused_step != "fused":
            print(f"{variant}: no fused step ({engine.fused_step}): these are the graphs' scores", file=sys.stderr)
        for split, (sources, references) in splits.items():
            scores = {}
            for beam in args.beam:
                started = time.time()
                options = engine.resolved(
                    TranslateOptions(beam_size=beam, no_repeat_ngram_size=args.no_repeat_ngram_size)
                )
                hyps, truncated = translate_split(engine, direction, sources, options, args.batch_size)
                result = bleu(hyps, references, tokenize=tokenize, language=target)
                result.update(beam_size=beam, seconds=round(time.time() - started, 1), providers=engine.providers)
                result["no_repeat_ngram_size"] = options.no_repeat_ngram_size
                result["truncated_sources"] = truncated
                if engine.shortlist is not None:  # searched over the bundle's lexical shortlist (core/shortlist.py)
                    result["shortlist"] = True
                if direction.pivot:
                    result["pivot"] = direction.pivot
                scores[f"beam{beam}"] = result
                print(score_line(f"{variant} {direction.name} {split} beam={beam}", result), file=sys.stderr)
                if args.hypotheses:
                    write_hypotheses(f"{args.hypotheses}.{variant}.{split}.beam{beam}", hyps)
            report.setdefault(variant, {})[split] = {"split": split, **scores}
        entry = manifest["variants"][variant]
        if not own:  # another direction of a multilingual bundle: its scores beside the headline, not instead of it
            entry.setdefault("direction_evaluations", {})[direction.name] = report[variant]
            continue
        entry["bleu"] = report[variant][args.split[0]]  # the first split is the bundle's headline score
        if len(args.split) > 1:
            entry["evaluations"] = report[variant]
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    fp32 = manifest["variants"]["fp32"].get("bleu")
    if fp32:
        for variant in ("int8", "fp16"):
            entry = manifest["variants"].get(variant, {}).get("bleu")
            if entry:
                keys = [k for k in fp32 if k.startswith("beam") and k in entry]
                manifest["variants"][variant]["within_bleu_budget"] = all(
                    fp32[k]["bleu"] - entry[k]["bleu"] <= MAX_BLEU_LOSS for k in keys
                )
    int8 = manifest["variants"].get("int8", {})
    static = int8.get("quantization", {}).get("batch_independent", False)
    manifest["default_variant"] = "int8" if static and int8.get("within_bleu_budget") else "fp32"
    manifest["default_variant_rule"] = (
        "int8 is served by default on CPU when it is statically quantized (activation scales fixed at export, so a "
        f"sentence's answer never depends on its batch companions) and loses <= {MAX_BLEU_LOSS} BLEU against fp32 at "
        "every measured beam size; otherwise fp32 (exact). GPUs serve fp16 when the bundle has it, else fp32. "
        "MT_VARIANT overrides."
    )
    served = decoding_defaults(manifest)["no_repeat_ngram_size"]
    other_decoding = args.no_repeat_ngram_size not in (None, served)
    if args.limit or args.no_seal or other_decoding:
        if args.limit:
            why = f"--limit {args.limit}: scores of part of each split"
        elif other_decoding:
            why = f"--no-repeat-ngram-size {args.no_repeat_ngram_size}: not the bundle's default ({served})"
        else:
            why = "--no-seal"
        print(f"{why}: not written to the manifest", file=sys.stderr)
    else:
        seal(bundle.path, manifest)
    print(json.dumps({v: manifest["variants"][v].get("bleu") for v in manifest["variants"]}, indent=2))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    import random

    from export.parity import graph_max_diff, step_max_diff, translation_parity

    bundle = load_bundle(args.bundle)
    model, _ = load_release(args.model)
    if bundle.manifest.get("training", {}).get("weights") == FLOAT16_WEIGHTS:
        round_to_float16(model)  # the model the bundle holds (export --float16-storage)
    # parity of the graphs: the whole vocabulary, as PyTorch has it (a shortlist's effect on BLEU is measured by
    # evaluate with and without it, export.cli compare)
    engine = Engine(bundle, variant="fp32", providers=args.providers, shortlist=False)
    rng = random.Random(0)
    limit = model.cfg.max_positions  # positions beyond the model's table are not defined in either runtime
    shapes = []
    for _ in range(args.shapes):
        tgt = rng.choice([1, 1, 3])
        shapes.append((rng.randint(1, 16), rng.randint(1, min(100, limit)), tgt, rng.randint(0, min(50, limit - tgt))))
    report: dict[str, object] = {"max_abs_diff": graph_max_diff(model, engine, shapes), "shapes": shapes}
    if engine.step_decoder is not None:  # the lean search graphs, one new token per row
        report["max_abs_diff"].update(step_max_diff(model, engine.step_decoder, shapes))  # type: ignore[union-attr]
        if engine.live_step is not engine.step_decoder:  # the live decode's own graph (core/graphs.py LIVE_STEP)
            live = step_max_diff(model, engine.live_step, shapes)
            report["max_abs_diff"].update({f"live_{name}": diff for name, diff in live.items()})  # type: ignore[union-attr]
    if args.data:
        from model.data import read_parallel

        m = bundle.manifest
        sources, _ = read_parallel(args.data, args.split, m["source_language"], m["target_language"])
        sources = sources[: args.limit] if args.limit else sources
        for beam in args.beam:
            parity = translation_parity(model, engine, sources, beam)
            report[f"beam{beam}"] = {
                "identical": parity.identical,
                "total": parity.total,
                "rate": round(parity.rate, 4),
                "differing": parity.differing,
            }
    text = json.dumps(report, indent=2)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text)
    worst = max(report["max_abs_diff"].values())  # type: ignore[union-attr]
    return 0 if worst <= 1e-4 else 1


def cmd_shortlist(args: argparse.Namespace) -> int:
    from export.shortlist import add_shortlist, learn_for_bundle

    options = {key: getattr(args, key) for key in DEFAULTS}
    bundle_dir = Path(args.bundle)
    load_bundle(bundle_dir)  # refuses a bundle whose files do not match its manifest before anything is written
    started = time.time()
    shortlist, info = learn_for_bundle(bundle_dir, Path(args.data), args.prefix, args.limit, **options)
    manifest = add_shortlist(bundle_dir, shortlist, {**info, "seconds": round(time.time() - started, 1)})
    print(json.dumps(manifest["shortlist"], indent=2))
    return 0


def cmd_decoding(args: argparse.Namespace) -> int:
    """Set the bundle's decoding defaults (the options a request leaves out) and reseal its manifest."""
    bundle = load_bundle(args.bundle)  # refuses a bundle whose files do not match its manifest
    manifest = bundle.manifest
    decoding = dict(manifest.get("decoding", {}))
    decoding["no_repeat_ngram_size"] = args.no_repeat_ngram_size
    manifest["decoding"] = decoding
    if args.why:
        manifest["decoding_reason"] = args.why
    seal(bundle.path, manifest)
    print(json.dumps({"decoding": decoding, "decoding_reason": manifest.get("decoding_reason")}, indent=2))
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    """Rewrite the bundles' graphs in place where the current exporter computes the same values faster."""
    from export.upgrade import upgrade_bundle

    for bundle in args.bundle:
        load_bundle(bundle)  # refuses a bundle whose files do not match its manifest, before any is changed
    commit = git_commit()  # the code's commit, before the first rewrite makes the work tree dirty
    changed = {bundle: upgrade_bundle(Path(bundle), commit) for bundle in args.bundle}
    print(json.dumps({"upgraded": changed}, indent=2))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from export.report_compare import compare, table, within

    rows = compare(json.loads(Path(args.base).read_text()), json.loads(Path(args.candidate).read_text()))
    print(table(rows, args.max_loss))
    worst = min(r["delta"] for r in rows)
    ok = within(rows, args.max_loss)
    print(f"largest loss {-worst:+.2f} BLEU: {'within' if ok else 'over'} the {args.max_loss} allowed", file=sys.stderr)
    return 0 if ok else 1


def cmd_release_from_bundle(args: argparse.Namespace) -> int:
    from export.float16_storage import release_from_bundle

    try:
        meta = release_from_bundle(Path(args.bundle), Path(args.out))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"wrote {args.out}: the weights of {meta['from_bundle']} (load_release, model.cli train init_from)")
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    from export.report_tables import scores, variants

    report = json.loads(Path(args.report).read_text())
    baseline = json.loads(Path(args.baseline).read_text()) if args.baseline else None
    print(scores(report, args.variant, baseline), end="\n\n")
    print(variants(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("export", help="checkpoint folder -> bundle folder")
    p.add_argument(
        "--model", required=True, help="released model folder (model.safetensors, config.json, tokenizer.model)"
    )
    p.add_argument("--out", required=True, help="bundle folder, e.g. model_repository/de-en/1")
    p.add_argument("--name", required=True)
    p.add_argument("--version", type=int, default=1)
    p.add_argument("--variants", nargs="+", default=["fp32", "int8"], choices=VARIANTS)
    p.add_argument(
        "--source-language",
        help="the bundle's source language (default: the model's; required for a model of several sources)",
    )
    p.add_argument("--target-language", help="the bundle's target language (default: the model's)")
    p.add_argument(
        "--directions",
        help="a multilingual model's directions, e.g. de-en,en-de,zh-en,en-zh,de-zh:pivot=en,zh-de:pivot=en:"
        " each tagged with its target's tag (<2en>), a user symbol of the tokenizer; the first is the bundle's own"
        " pair (core/directions.py)",
    )
    p.add_argument(
        "--source-normalization",
        help="core.normalize rule set the engine applies to sources (default: the one in the model's prepare.json, "
        "none without it; '' for none)",
    )
    p.add_argument(
        "--calibration-data",
        help="source-language sentences, one per line, that fix the int8 activation scales (needed for int8)",
    )
    p.add_argument("--calibration-sentences", type=int, default=256, help="how many lines to draw (seeded)")
    p.add_argument(
        "--bundle-format",
        type=int,
        choices=[1, 2],
        default=2,
        help="2: graphs/ with each tensor stored once in per-variant weights files (export/pack.py); "
        "1: self-contained graphs, one folder per variant (several times larger)",
    )
    p.add_argument(
        "--float16-storage",
        action="store_true",
        help="round the weights to float16 and store them so (format 2): half the bytes of a float32 bundle; the "
        "fp32 variant computes in float32 with those weights (export/pack.py)",
    )
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "import-hf",
        help="Hugging Face MarianMTModel checkpoint (OPUS-MT) folder -> bundle model_repository/<name>/<version>",
    )
    p.add_argument("--from", dest="source", required=True, help="checkpoint folder (or a hub id: needs internet)")
    p.add_argument("--name", required=True)
    p.add_argument("--version", type=int, required=True)
    p.add_argument("--repository", default="model_repository")
    p.add_argument("--variants", nargs="+", default=["fp32"], choices=VARIANTS, help="int8 needs --calibration-data")
    p.add_argument("--source-language", help="default: tokenizer_config.json source_lang")
    p.add_argument("--target-language", help="default: tokenizer_config.json target_lang")
    p.add_argument("--calibration-data", help="source-language sentences, one per line (for int8)")
    p.add_argument("--calibration-sentences", type=int, default=256)
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=lambda a: cmd_import_hf(a, cmd_export))

    p = sub.add_parser(
        "import-argos",
        help="Argos Translate package (.argosmodel: CTranslate2 Transformer + SentencePiece) -> bundle "
        "model_repository/<name>/<version>",
    )
    p.add_argument("--from", dest="source", required=True, help="the .argosmodel file")
    p.add_argument("--name", required=True)
    p.add_argument("--version", type=int, required=True)
    p.add_argument("--repository", default="model_repository")
    p.add_argument("--variants", nargs="+", default=["fp32"], choices=VARIANTS, help="int8 needs --calibration-data")
    p.add_argument("--source-language", help="default: metadata.json from_code")
    p.add_argument("--target-language", help="default: metadata.json to_code")
    p.add_argument(
        "--source-eos",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether the encoder reads a source EOS; default: the model's config.json add_source_eos (false when "
        "absent), which is what Argos Translate feeds CTranslate2",
    )
    p.add_argument("--calibration-data", help="source-language sentences, one per line (for int8)")
    p.add_argument("--calibration-sentences", type=int, default=256)
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=lambda a: cmd_import_argos(a, cmd_export))

    def bundle_and_corpus(p: argparse.ArgumentParser, data_help: str, data_required: bool) -> None:
        """Arguments evaluate and verify share: the bundle, the corpus split, beam sizes, providers."""
        p.add_argument("--bundle", required=True)
        p.add_argument("--data", required=data_required, help=data_help)
        if p.prog.split()[-1] != "evaluate":  # evaluate takes several splits
            p.add_argument("--split", default="test_2016_flickr")
        p.add_argument("--beam", type=int, nargs="+", default=[1, 4])
        p.add_argument("--providers", default="cpu")
        p.add_argument("--limit", type=int, default=0, help="only the first N sentences (0 = all); a smoke run")

    p = sub.add_parser(
        "backtranslate", help="tagged back-translation (model/backtranslate.py) with the engine: bt.<lang> files"
    )
    p.add_argument("--bundle", required=True, help="a bundle that serves --direction (e.g. a multilingual one)")
    p.add_argument("--input", required=True, help="monolingual text, one sentence a line (e.g. news-en-mono/news.en)")
    p.add_argument("--direction", required=True, help="the reverse direction to translate in, e.g. en-de")
    p.add_argument("--out", required=True, help="folder for bt.<lang> files (appended to: a rerun continues)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--variant", default="int8")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    p.add_argument("--providers", default="cpu")
    p.add_argument("--limit", type=int, default=0, help="only the first N lines (0 = all)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_backtranslate)

    p = sub.add_parser("evaluate", help="BLEU of every variant with the engine; recorded in the manifest")
    bundle_and_corpus(p, "corpus folder with <split>.<src> and <split>.<tgt>", data_required=True)
    p.add_argument(
        "--split",
        nargs="+",
        default=["test_2016_flickr"],
        help="one or more splits; the first is the bundle's headline BLEU, all go to the manifest's evaluations",
    )
    p.add_argument(
        "--direction",
        help="a multilingual bundle's direction to score (de-zh, en-de ...; default: its own pair, the first listed): "
        "sources tagged as the service tags them, a pivoted direction through both legs; sacreBLEU's zh tokenizer for "
        "Chinese targets. Scores of another direction than the bundle's own go to each variant's "
        "direction_evaluations",
    )
    p.add_argument("--report", help="write every score (variant -> split -> beam) to this JSON file too")
    p.add_argument("--hypotheses", help="write translations to <this>.<variant>.<split>.beam<N>")
    p.add_argument("--no-seal", action="store_true", help="score only: leave the bundle's manifest as it is")
    p.add_argument(
        "--no-shortlist",
        action="store_true",
        help="search the whole vocabulary even when the bundle has a lexical shortlist (the engine uses it by default)",
    )
    p.add_argument(
        "--no-repeat-ngram-size",
        type=int,
        help="search with this repeated-n-gram block (0: off) instead of the bundle's default; such scores are "
        "not sealed into the manifest unless they are the default's",
    )
    p.add_argument(
        "--fused-step",
        action="store_true",
        help="search with the fused int8 decoder step (MT_FUSED_STEP, `make native`) where it applies; scores only: "
        "needs --no-seal (the manifest records the graphs' scores)",
    )
    p.add_argument("--variants", nargs="*")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "decoding",
        help="set the bundle's decoding defaults, which requests that leave the option out get (GET /v1/models "
        "shows them); the manifest is sealed again",
    )
    p.add_argument("--bundle", required=True, help="bundle folder (its manifest is rewritten)")
    p.add_argument(
        "--no-repeat-ngram-size",
        type=int,
        required=True,
        choices=range(33),
        metavar="0..32",
        help="no n-gram of this many subwords twice in a translation; 0: off",
    )
    p.add_argument("--why", help="the measurement behind the choice, kept in the manifest as decoding_reason")
    p.set_defaults(func=cmd_decoding)

    p = sub.add_parser(
        "upgrade",
        help="rewrite a released bundle's graphs in place where the current exporter computes the same values "
        "faster (export/upgrade.py; weights files untouched, the manifest records it and is sealed again)",
    )
    p.add_argument(
        "--bundle", nargs="+", required=True, help="bundle folders (their graphs and manifests are rewritten)"
    )
    p.set_defaults(func=cmd_upgrade)

    p = sub.add_parser("verify", help="PyTorch vs onnxruntime parity (graphs and translations)")
    bundle_and_corpus(p, "corpus folder for translation parity (optional)", data_required=False)
    p.add_argument("--model", required=True)
    p.add_argument("--shapes", type=int, default=12)
    p.add_argument("--output")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "shortlist",
        help="learn a lexical shortlist (IBM Model 1 over the bundle's subwords) from parallel text and add it to "
        "the bundle in place: shortlist.npz, step graphs that take vocab_ids, the manifest sealed again",
    )
    p.add_argument("--bundle", required=True, help="bundle folder (rewritten in place: export to a copy first)")
    p.add_argument("--data", required=True, help="corpus folder with <prefix>.<source> and <prefix>.<target>")
    p.add_argument("--prefix", default="train", help="file prefix of the parallel text (default: train)")
    p.add_argument("--limit", type=int, default=0, help="only the first N pairs (0 = all)")
    # defaults: export/shortlist.py DEFAULTS, chosen on de-en v2 (docs/engine-speed-log.md)
    p.add_argument("--top-n", type=int, default=DEFAULTS["top_n"], help="translations kept per source subword")
    p.add_argument("--min-prob", type=float, default=DEFAULTS["min_prob"], help="least p(target | source) kept")
    p.add_argument("--frequent", type=int, default=DEFAULTS["frequent"], help="frequent target subwords always in")
    p.add_argument("--iterations", type=int, default=DEFAULTS["iterations"], help="IBM Model 1 EM iterations")
    p.set_defaults(func=cmd_shortlist)

    p = sub.add_parser(
        "compare",
        help="two evaluate --report files side by side; exit 1 when the candidate loses more than --max-loss BLEU "
        "on any variant, split and beam (the release's shortlist check: --no-shortlist report as the base)",
    )
    p.add_argument("--base", required=True)
    p.add_argument("--candidate", required=True)
    p.add_argument("--max-loss", type=float, default=0.2)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("tables", help="markdown tables of an evaluate --report file (model cards, release notes)")
    p.add_argument("--report", required=True)
    p.add_argument("--baseline", help="the replaced model's report on the same splits, shown beside")
    p.add_argument("--variant", default="int8", help="the variant of the scores table (the served one)")
    p.set_defaults(func=cmd_tables)

    p = sub.add_parser(
        "release-from-bundle",
        help="the PyTorch release folder (model.safetensors, config.json, tokenizer.model) of a bundle exported with "
        "--float16-storage, whose float16 weights file is a safetensors file of the parameters",
    )
    p.add_argument("--bundle", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_release_from_bundle)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
