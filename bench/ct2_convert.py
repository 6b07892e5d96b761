"""Convert a released checkpoint (``model.checkpoint.load_release`` folder) to a CTranslate2 model, and check it.

    python -m bench.ct2_convert --model checkpoints/de-en --out build/ct2/de-en \
        --data ../shared/data/multi30k --split test_2016_flickr

The spec is filled by hand (``ctranslate2.specs``), so CTranslate2 runs exactly our weights:
- post-norm layers (pre_norm=False): x = LN(x + sublayer(x)), no final encoder/decoder norm; or pre-norm layers
  (pre_norm=True, the general-domain models): x = x + sublayer(LN(x)), each stack ending in its LayerNorm;
- embeddings multiplied by sqrt(d_model) (scale_embeddings), one table shared by source, target and output;
- positions: CTranslate2's built-in sinusoidal table concatenates [sin | cos] halves, ours interleaves
  PE(i, 2j) = sin, PE(i, 2j+1) = cos, so our own table is written into ``position_encodings.encodings``;
- self-attention Q, K, V fused into one (3d, d) linear, cross-attention K, V fused into one (2d, d);
- LayerNorm epsilon 1e-5 (torch's default; CTranslate2 would otherwise use 1e-6);
- vocabulary: our SentencePiece pieces in id order, so CTranslate2 token i is our id i; the decoder starts
  from <s> (id 1) and stops at </s> (id 2); sources are fed as pieces with </s> appended, as the engine does.
Weights are saved in float32; int8 is chosen when loading (``compute_type="int8"``).

Before any timing, ``check_agreement`` compares CTranslate2's greedy translations with the PyTorch reference
token by token; the conversion is rejected (exit 1) if fewer than ``--min-agreement`` of the sentences match.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm default, used by every LayerNorm of model/


def _np(t) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


def _linear(spec, linear) -> None:
    spec.weight = _np(linear.weight)  # (out, in), torch's layout, which CTranslate2 uses too
    if linear.bias is not None:
        spec.bias = _np(linear.bias)


def _fused(spec, linears) -> None:
    spec.weight = np.concatenate([_np(m.weight) for m in linears])
    spec.bias = np.concatenate([_np(m.bias) for m in linears])


def _norm(spec, norm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def build_spec(model, pieces: Sequence[str]):
    """A ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights; ``pieces`` is the id -> piece list."""
    from ctranslate2.specs import common_spec, transformer_spec

    from model.positional import sinusoidal_table

    cfg = model.cfg
    if cfg.positional_encoding != "sinusoidal" or cfg.activation != "relu":
        raise ValueError("this converter covers sinusoidal positions and relu (post-norm or pre-norm layers)")
    pre_norm = cfg.norm_placement == "pre"
    if len(pieces) != cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(pieces)} pieces, model vocabulary is {cfg.vocab_size}")
    encoder = transformer_spec.TransformerEncoderSpec(
        cfg.n_encoder_layers, cfg.n_heads, pre_norm=pre_norm, activation=common_spec.Activation.RELU
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        cfg.n_decoder_layers, cfg.n_heads, pre_norm=pre_norm, activation=common_spec.Activation.RELU
    )
    if pre_norm:  # a sublayer's LayerNorm goes before it (same spec names), and each stack ends in a LayerNorm
        _norm(encoder.layer_norm, model.encoder_norm)
        _norm(decoder.layer_norm, model.decoder_norm)
    positions = sinusoidal_table(cfg.max_positions, cfg.d_model).numpy()  # (max_positions, d_model), interleaved
    embedding = _np(model.src_embed.weight)
    for side, embed in ((encoder, model.src_embed), (decoder, model.tgt_embed)):
        side.scale_embeddings = True  # x = E[token] * sqrt(d_model) + PE[position]
        side.position_encodings.encodings = positions.copy()
        (side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings).weight = (
            embedding if embed is model.src_embed else _np(embed.weight)
        )
    for spec, layer in zip(encoder.layer, model.encoder_layers, strict=True):
        attn = layer.self_attn
        _fused(spec.self_attention.linear[0], [attn.q_proj, attn.k_proj, attn.v_proj])
        _linear(spec.self_attention.linear[1], attn.out_proj)
        _norm(spec.self_attention.layer_norm, layer.attn_residual.norm)
        _linear(spec.ffn.linear_0, layer.ffn.w1)
        _linear(spec.ffn.linear_1, layer.ffn.w2)
        _norm(spec.ffn.layer_norm, layer.ffn_residual.norm)
    for spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        attn, cross = layer.self_attn, layer.cross_attn
        _fused(spec.self_attention.linear[0], [attn.q_proj, attn.k_proj, attn.v_proj])
        _linear(spec.self_attention.linear[1], attn.out_proj)
        _norm(spec.self_attention.layer_norm, layer.self_residual.norm)
        _linear(spec.attention.linear[0], cross.q_proj)
        _fused(spec.attention.linear[1], [cross.k_proj, cross.v_proj])
        _linear(spec.attention.linear[2], cross.out_proj)
        _norm(spec.attention.layer_norm, layer.cross_residual.norm)
        _linear(spec.ffn.linear_0, layer.ffn.w1)
        _linear(spec.ffn.linear_1, layer.ffn.w2)
        _norm(spec.ffn.layer_norm, layer.ffn_residual.norm)
    _linear(decoder.projection, model.output)
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.config.decoder_start_token = pieces[cfg.bos_id]
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = (
        pieces[cfg.bos_id],
        pieces[cfg.eos_id],
        pieces[cfg.unk_id],
    )
    spec.register_source_vocabulary(list(pieces))
    spec.register_target_vocabulary(list(pieces))
    return spec


def convert(release: Path, out: Path, force: bool = False) -> Path:
    """Write the CTranslate2 model of ``release`` (float32 weights) into ``out``; returns ``out``."""
    from core.tokenizer import Tokenizer
    from model.checkpoint import TOKENIZER_FILE, load_release

    if (out / "model.bin").exists() and not force:
        return out
    model, _ = load_release(release)
    tokenizer = Tokenizer(release / TOKENIZER_FILE)
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    if len(set(pieces)) != len(pieces):
        raise ValueError("duplicate SentencePiece pieces: CTranslate2 maps tokens by string")
    spec = build_spec(model, pieces)
    spec.validate()
    spec.optimize(quantization="float32")
    out.mkdir(parents=True, exist_ok=True)
    spec.save(str(out))
    (out / "source.json").write_text(json.dumps({"release": str(release)}) + "\n")
    return out


class CT2Runner:
    """Token-id in, token-id out wrapper around ``ctranslate2.Translator`` (no re-tokenisation)."""

    def __init__(
        self,
        model_dir: Path,
        pieces: Sequence[str],
        compute_type: str = "float32",
        threads: int = 1,
        use_vmap: bool = False,
        index: dict[str, int] | None = None,
        source_eos: bool = True,
    ):
        """``pieces``: CTranslate2's piece of each of our ids; ``index``: our id of each piece CTranslate2 outputs
        (default: the inverse of ``pieces``); ``source_eos`` false: the sources' EOS is not passed (a model that never
        saw one, ModelConfig.source_eos); ``use_vmap``: decode over the vocabulary map (``vmap.txt`` in ``model_dir``,
        ``vmap_model``)."""
        import ctranslate2

        self.translator = ctranslate2.Translator(
            str(model_dir), device="cpu", compute_type=compute_type, intra_threads=threads, inter_threads=1
        )
        self.pieces = list(pieces)
        self.index = index if index is not None else {p: i for i, p in enumerate(self.pieces)}
        self.use_vmap, self.source_eos = use_vmap, source_eos

    def translate_ids(
        self,
        sources: Sequence[Sequence[int]],
        limits: Sequence[int],
        beam_size: int = 1,
        length_penalty: float = 0.6,
    ) -> list[list[int]]:
        """Best hypothesis ids (EOS excluded) per source (ids with EOS); each cut at its own length limit.

        CTranslate2 takes one max_decoding_length per batch: the batch's largest limit is used and longer
        outputs are cut to the sentence's own limit (exact for greedy, which extends a prefix).
        """
        batch = [[self.pieces[i] for i in (s if self.source_eos else s[:-1])] for s in sources]
        results = self.translator.translate_batch(
            batch,
            beam_size=beam_size,
            length_penalty=length_penalty,
            max_decoding_length=max(limits),
            min_decoding_length=0,  # as our engine: a translation may end at once (CTranslate2's default is 1)
            max_batch_size=0,
            return_scores=False,
            use_vmap=self.use_vmap,
        )
        return [[self.index[p] for p in r.hypotheses[0]][:lim] for r, lim in zip(results, limits, strict=True)]


def vmap_model(model_dir: Path, bundle: Path, out: Path | None = None) -> Path:
    """A CTranslate2 model folder that decodes over the bundle's lexical shortlist (core/shortlist.py): the files of
    ``model_dir`` linked and a ``vmap.txt`` written from the shortlist in CTranslate2's vocabulary-map format, one
    line per source piece, ``piece<TAB>target pieces separated by spaces``, and the always-included frequent pieces
    on the line of the empty source key."""
    from core.bundle import load_bundle
    from core.shortlist import load_shortlist

    loaded = load_bundle(bundle)
    entry = loaded.manifest.get("shortlist")
    if not entry:
        raise ValueError(f"{bundle} has no shortlist (python -m export.cli shortlist)")
    pieces = json.loads((model_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
    shortlist = load_shortlist(loaded.path / entry["file"], len(pieces))
    out = out or model_dir.with_name(model_dir.name + "-vmap")
    out.mkdir(parents=True, exist_ok=True)
    for f in model_dir.iterdir():
        link = out / f.name
        if f.name != "vmap.txt" and not link.exists():
            link.symlink_to(f.resolve())
    lines = ["\t" + " ".join(pieces[int(t)] for t in shortlist.frequent)]
    for s, piece in enumerate(pieces):
        targets = shortlist.targets_of(s)
        if len(targets):
            lines.append(piece + "\t" + " ".join(pieces[int(t)] for t in targets))
    (out / "vmap.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def check_agreement(
    release: Path, ct2_dir: Path, texts: Sequence[str], batch_size: int = 32, threads: int = 1
) -> dict[str, object]:
    """Greedy token ids of CTranslate2 (float32) vs the PyTorch reference (model.decoding) on ``texts``."""
    import torch

    from core.search import length_limits
    from core.tokenizer import EOS_ID, Tokenizer
    from model.checkpoint import TOKENIZER_FILE, load_release
    from model.data import pad
    from model.decoding import greedy_search

    torch.set_num_threads(threads)
    model, _ = load_release(release)
    tokenizer = Tokenizer(release / TOKENIZER_FILE)
    runner = CT2Runner(ct2_dir, [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)], threads=threads)
    sources = [t[: model.cfg.max_positions - 1] + [EOS_ID] for t in tokenizer.encode_batch(texts)]
    same, differing = 0, []
    for start in range(0, len(sources), batch_size):
        chunk = sources[start : start + batch_size]
        limits = length_limits([len(s) for s in chunk], model.cfg.max_positions)
        with torch.no_grad():
            ref = [h.tokens for h in greedy_search(model, pad(chunk))]
        got = runner.translate_ids(chunk, limits)
        for offset, (r, g) in enumerate(zip(ref, got, strict=True)):
            if r == g:
                same += 1
            else:
                differing.append(start + offset)
    return {"total": len(sources), "identical": same, "rate": same / max(len(sources), 1), "differing": differing}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ct2_convert", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="checkpoints/de-en", help="released model folder")
    parser.add_argument("--out", default="build/ct2/de-en", help="CTranslate2 model folder to write")
    parser.add_argument("--data", help="corpus folder: check greedy agreement with PyTorch on --split")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--source-language", default="de")
    parser.add_argument("--limit", type=int, default=0, help="check only the first N sentences (0 = all)")
    parser.add_argument("--min-agreement", type=float, default=0.99)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--force", action="store_true", help="convert again even if --out holds a model")
    args = parser.parse_args(argv)
    started = time.time()
    out = convert(Path(args.model), Path(args.out), force=args.force)
    print(f"CTranslate2 model in {out} ({time.time() - started:.1f}s)", file=sys.stderr)
    if not args.data:
        return 0
    texts = (Path(args.data) / f"{args.split}.{args.source_language}").read_text(encoding="utf-8").splitlines()
    texts = texts[: args.limit] if args.limit else texts
    report = check_agreement(Path(args.model), out, texts, threads=args.threads)
    shown = {**report, "differing": report["differing"][:20]}
    print(json.dumps(shown), file=sys.stderr)
    if report["rate"] < args.min_agreement:
        print(
            f"CTranslate2 greedy output matches PyTorch on {report['rate']:.2%} of sentences, below "
            f"{args.min_agreement:.0%}: the conversion does not run our model; fix it before timing anything",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
