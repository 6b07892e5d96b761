"""Tables of bench/engine.py: per engine and setting throughput, BLEU, memory, ratios and hardware use."""

from __future__ import annotations

import statistics

from bench.flops import decoder_step_macs, encoder_macs_per_token, translation_macs

PRECISION = {"pytorch": "fp32", "ort-fp32": "fp32", "ort-int8": "int8", "ct2-fp32": "fp32", "ct2-int8": "int8"}


def _precision(engine: str) -> str:
    name = engine.split("+")[0]  # ort-<variant> engines of extra bundle variants (ort-int8dyn) by their prefix
    return PRECISION.get(name) or next((p for p in ("int8", "fp16", "fp32") if name.split("-")[-1].startswith(p)), "?")


def summarize(runs, work, ids, refs, tokenizer, config, peak, rates) -> list[dict]:
    import sacrebleu

    peak_rate = {  # the machine's best 1-thread matmul rate for the engine's precision
        "fp32": max(v for k, v in rates.items() if "1024" in k and "int8" not in k),
        "int8": max((v for k, v in rates.items() if "1024" in k and "int8" in k), default=float("nan")),
    }
    rows = []
    for (engine, key), results in runs.items():
        w = work[key]
        outputs = results[-1]["outputs"]
        stable = all(r["outputs"] == outputs for r in results)
        wall = statistics.median(r["wall"] for r in results)
        cpu = statistics.median(r["cpu"] for r in results)
        tokens = sum(len(o) for o in outputs)
        hyps = [tokenizer.decode(o) for o in outputs]
        bleu = sacrebleu.corpus_bleu(hyps, [[refs[i] for i in w["index"]]]).score
        macs = sum(
            translation_macs(config, len(ids[i]), len(o), w["beam"]) for i, o in zip(w["index"], outputs, strict=True)
        )
        rows.append(
            {
                "engine": engine,
                "precision": _precision(engine),
                "setting": key,
                "sentences": len(outputs),
                "tokens": tokens,
                "wall_s": wall,
                "cpu_s": cpu,
                "walls": [r["wall"] for r in results],
                "cpus": [r["cpu"] for r in results],
                "sent_per_s": len(outputs) / wall,
                "tok_per_s": tokens / wall,
                "tok_per_cpu_s": tokens / cpu,
                "bleu": bleu,
                "peak_rss_mib": peak[engine],
                "gflop_per_cpu_s": 2 * macs / cpu / 1e9,
                "pct_peak": 100 * 2 * macs / cpu / 1e9 / peak_rate[_precision(engine)],
                "deterministic": stable,
            }
        )
    for row in rows:  # ratio to CTranslate2 of the same precision on the same setting (and the same shortlist)
        listed = "+shortlist" in row["engine"] or "+vmap" in row["engine"]
        ct2 = f"ct2-{row['precision']}" + ("+vmap" if listed else "")
        same = [r for r in rows if r["engine"] == ct2 and r["setting"] == row["setting"]]
        ref = same[0] if same else None
        row["x_ct2_wall"] = row["tok_per_s"] / ref["tok_per_s"] if ref else None
        row["x_ct2_cpu"] = row["tok_per_cpu_s"] / ref["tok_per_cpu_s"] if ref else None
    return rows


def _f(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def render(rows: list[dict], meta: dict, config: dict) -> str:
    dec = decoder_step_macs(config, 15, 10)
    enc = encoder_macs_per_token(config, 15)
    sgemm = ", ".join(f"{k} {v} G(FL)OP/s" for k, v in meta["sgemm"].items())
    lines = [
        "## Engine: PyTorch eager vs onnxruntime engine vs CTranslate2",
        "",
        "Set-up on a fresh clone: `make dev-env && .venv/bin/pip install -e '.[bench]'` (PyTorch, onnxruntime, "
        "CTranslate2); the CTranslate2 model is converted from the checkpoint on the first run "
        "(bench/ct2_convert.py).  ",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; machine: {meta['machine']}; {meta['threads']} intra-op thread(s) for every engine; "
        f"median of {meta['repeats']} interleaved repeats after a warm-up pass.  ",
        f"Other load while measuring: {meta['background']}.  ",
        (
            f"Model: `{meta['bundle']}` (onnxruntime, imported) = `{meta['ct2']}` (CTranslate2, its source); "
            if meta.get("imported")
            else f"Model: `{meta['model']}` (PyTorch, CTranslate2) = `{meta['bundle']}` (onnxruntime); "
        )
        + f"{meta['sentences']} sentences at batch 32 (sorted by length), the first {meta['batch1_sentences']} at "
        "batch 1.  ",
        f"Greedy token-id agreement with the {meta.get('reference', 'pytorch')} reference (batch 32): "
        + ", ".join(f"{k} {v:.1%}" for k, v in meta["agreement"].items())
        + ".",
        "",
        "| engine | search | batch | sent/s | tok/s | tok/CPU-s | x CT2 tok/s (wall / CPU) | BLEU "
        "| peak RSS MiB | GFLOP/CPU-s | % of matmul peak |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = {e: i for i, e in enumerate(["pytorch", "ort-fp32", "ct2-fp32", "ort-int8", "ct2-int8"])}
    for row in sorted(rows, key=lambda r: (r["setting"], order.get(r["engine"], 99), r["engine"])):
        search, batch = row["setting"].split("/b")
        ratio = f"{_f(row['x_ct2_wall'], '.2f')} / {_f(row['x_ct2_cpu'], '.2f')}"
        lines.append(
            f"| {row['engine']} | {search} | {batch} | {row['sent_per_s']:.1f} | {row['tok_per_s']:.0f} "
            f"| {row['tok_per_cpu_s']:.0f} | {ratio} | {row['bleu']:.2f} | {row['peak_rss_mib']:.0f} "
            f"| {row['gflop_per_cpu_s']:.1f} | {row['pct_peak']:.0f} |"
        )
    lines += ["", *targets(rows)]
    lines += [
        "",
        "tok = generated target subwords of the best hypothesis (EOS excluded); tok/CPU-s divides by the engine "
        "process's CPU time instead of wall time (steadier when other work shares the cores). x CT2 = ratio to "
        "CTranslate2 of the same precision (PyTorch is fp32). BLEU: sacreBLEU on detokenized output of that "
        "setting's sentences (batch 1 rows score only their subset). Peak RSS: the engine's own process, "
        "whole run.",
        f"Work per token (bench/flops.py, multiply-adds of the matrix products): one decoder step at source "
        f"length 15, position 10 = {dec / 1e6:.2f} M MACs = {2 * dec / 1e6:.1f} MFLOP per row "
        f"({100 * config['d_model'] * config['vocab_size'] / dec:.0f}% in the output projection); encoder "
        f"{enc / 1e6:.2f} M MACs per source token (cross-attention keys/values included). Beam 4 runs 4 rows "
        "per sentence. GFLOP/CPU-s = these FLOPs of the setting (each sentence's real source and output "
        "lengths) / CPU seconds; % of matmul peak = against the best 1-thread matmul rate measured here for the "
        f"row's precision (float32 sgemm for fp32 rows, onnxruntime's int8 MatMul for int8 rows): {sgemm}.",
    ]
    return "\n".join(lines) + "\n"


def targets(rows: list[dict]) -> list[str]:
    """The issue's targets, on CPU-time throughput (tok/CPU-s) of this run."""
    by = {(r["engine"], r["setting"]): r for r in rows}
    settings = [s for s in ("greedy/b32", "beam4/b32", "greedy/b1", "beam4/b1") if ("ort-fp32", s) in by]

    def ratio(a: str, b: str, s: str) -> str:
        if (a, s) not in by or (b, s) not in by:
            return "n/a"
        return f"{by[(a, s)]['tok_per_cpu_s'] / by[(b, s)]['tok_per_cpu_s']:.2f}x"

    out = [
        "Targets (tok/CPU-s): onnxruntime fp32 vs PyTorch eager (>= 2x): "
        + ", ".join(f"{s} {ratio('ort-fp32', 'pytorch', s)}" for s in settings)
        + "; onnxruntime int8 vs CTranslate2 int8 at batch 32 (>= 1x): "
        + ", ".join(f"{s} {ratio('ort-int8', 'ct2-int8', s)}" for s in settings if s.endswith("b32")),
    ]
    deltas = [
        f"{s} {by[('ort-int8', s)]['bleu'] - by[('ort-fp32', s)]['bleu']:+.2f}"
        for s in settings
        if s.endswith("b32") and ("ort-int8", s) in by
    ]
    if deltas:
        out[0] += "; int8 - fp32 BLEU, onnxruntime (within 0.3): " + ", ".join(deltas) + "."
    listed = [
        f"{engine} {s} {ratio(engine + suffix, engine, s)} (BLEU {bleu_change(by, engine + suffix, engine, s):+.2f})"
        for engine, suffix in (
            ("ort-fp32", "+shortlist"),
            ("ort-int8", "+shortlist"),
            ("ct2-fp32", "+vmap"),
            ("ct2-int8", "+vmap"),
        )
        for s in settings
        if (engine + suffix, s) in by and (engine, s) in by
    ]
    if listed:
        out += [
            "",
            "Lexical shortlist (issue 33) vs the whole vocabulary, tok/CPU-s (BLEU change): " + ", ".join(listed) + ".",
        ]
    per_repeat = [
        f"{s} {ratio('ort-int8', 'ct2-int8', s)} ({repeat_ratios(by[('ort-int8', s)], by[('ct2-int8', s)])})"
        for s in settings
        if ("ort-int8", s) in by and ("ct2-int8", s) in by
    ]
    if per_repeat:
        out += [
            "",
            "Engine round 2 (issue 16), onnxruntime int8 vs CTranslate2 int8 at every setting (>= 1.1x), median "
            "(each repeat's ratio, in run order): " + ", ".join(per_repeat) + ".",
        ]
    return out


def bleu_change(by: dict, engine: str, reference: str, setting: str) -> float:
    return by[(engine, setting)]["bleu"] - by[(reference, setting)]["bleu"]


def repeat_ratios(row: dict, ref: dict) -> str:
    """tok/CPU-s ratio of two engines in each repeat (same outputs every repeat: the ratio of CPU seconds)."""
    return " / ".join(
        f"{(row['tokens'] / a) / (ref['tokens'] / b):.2f}" for a, b in zip(row["cpus"], ref["cpus"], strict=True)
    )
