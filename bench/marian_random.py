"""A random Marian model of OPUS-MT's shape, imported as a bundle, and its CTranslate2 int8 twin (same weights), for
``python -m bench.engine`` to run side by side (docs/serve-opus-mt.md, "Speed against CTranslate2").

    python -m bench.marian_random --data ../shared/data/multi30k --out build/opus-shape

writes ``<out>/checkpoint`` (a Hugging Face MarianMTModel, save_pretrained: OPUS-MT's shape by default, 6 + 6 layers,
d_model 512, 8 heads, FFN 2048, swish, a 58,101-piece vocabulary; random weights, as no OPUS-MT checkpoint can be
downloaded here), ``<out>/ct2`` (CTranslate2's own conversion of it, TransformersConverter, float32: CTranslate2
quantizes to int8 when loading with compute_type int8, as ``ct2-int8`` does) and ``<out>/repository/opus-shape/1``
(``python -m export.cli import-hf`` of it, fp32 and int8, int8 calibrated on the corpus's sources).

The tokenizer: one SentencePiece model trained on the corpus's train split (both languages, --spm-vocab pieces), the
vocabulary padded with unused pieces to --vocab (so the output layer has OPUS-MT's width). The decoder start's
embedding (Marian's pad) is zero, as in OPUS-MT checkpoints: CTranslate2 starts its decoder from a zero embedding.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

SHAPE = {"d_model": 512, "layers": 6, "heads": 8, "ffn": 2048, "vocab": 58101}  # Helsinki-NLP/opus-mt-de-en's


def write_tokenizer(directory: Path, lines: list[str], spm_vocab: int, vocab_size: int) -> dict[str, int]:
    """source.spm = target.spm (one joint model) and vocab.json: </s> 0, <unk> 1, the pieces, fillers, <pad> last."""
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=out, vocab_size=spm_vocab, character_coverage=1.0, minloglevel=2
    )
    proto = out.getvalue()
    for name in ("source.spm", "target.spm"):
        (directory / name).write_bytes(proto)
    processor = spm.SentencePieceProcessor(model_proto=proto)
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(processor.get_piece_size()):
        if not (processor.is_control(i) or processor.is_unknown(i)):
            vocab.setdefault(processor.id_to_piece(i), len(vocab))
    filler = 0
    while len(vocab) < vocab_size - 1:
        vocab.setdefault(f"\u2581unused{filler}", len(vocab))
        filler += 1
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    return vocab


def write_checkpoint(directory: Path, vocab: dict[str, int], args: argparse.Namespace) -> None:
    import torch
    from transformers import MarianConfig, MarianMTModel

    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=args.d_model,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_ffn_dim=args.ffn,
        decoder_ffn_dim=args.ffn,
        max_position_embeddings=512,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=None,
    )
    torch.manual_seed(args.seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # weights as large as a trained model's: decisive logits, so that float rounding (another
        for name, p in model.named_parameters():  # runtime's order of operations) does not flip a greedy choice
            if "layer_norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, args.init_std)
        model.model.shared.weight[pad].zero_()  # OPUS-MT's pad row; CTranslate2 starts from a zero embedding
    model.generation_config.bad_words_ids = [[pad]]
    model.generation_config.max_length = 512
    model.generation_config.num_beams = 4
    model.save_pretrained(directory)
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": args.source, "target_lang": args.target})
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.marian_random", description=__doc__)
    parser.add_argument("--data", required=True, help="corpus folder with train.<source> and train.<target>")
    parser.add_argument("--out", default="build/opus-shape")
    parser.add_argument("--source", default="de")
    parser.add_argument("--target", default="en")
    parser.add_argument("--d-model", type=int, default=SHAPE["d_model"])
    parser.add_argument("--layers", type=int, default=SHAPE["layers"])
    parser.add_argument("--heads", type=int, default=SHAPE["heads"])
    parser.add_argument("--ffn", type=int, default=SHAPE["ffn"])
    parser.add_argument("--vocab", type=int, default=SHAPE["vocab"])
    parser.add_argument("--spm-vocab", type=int, default=8000, help="pieces of the SentencePiece model")
    parser.add_argument("--lines", type=int, default=20000, help="training lines per language for SentencePiece")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init-std", type=float, default=0.3, help="standard deviation of the random weights")
    args = parser.parse_args(argv)

    import ctranslate2

    from export.cli import main as export_cli

    out, data = Path(args.out), Path(args.data)
    checkpoint = out / "checkpoint"
    checkpoint.mkdir(parents=True, exist_ok=True)
    lines = []
    for language in (args.source, args.target):
        lines += (data / f"train.{language}").read_text(encoding="utf-8").splitlines()[: args.lines]
    vocab = write_tokenizer(checkpoint, lines, args.spm_vocab, args.vocab)
    write_checkpoint(checkpoint, vocab, args)
    ctranslate2.converters.TransformersConverter(str(checkpoint)).convert(str(out / "ct2"), force=True)
    import_args = ["import-hf", "--from", str(checkpoint), "--name", "opus-shape", "--version", "1"]
    import_args += ["--repository", str(out / "repository"), "--variants", "fp32", "int8", "--force"]
    status = export_cli([*import_args, "--calibration-data", str(data / f"train.{args.source}")])
    print(f"wrote {checkpoint}, {out / 'ct2'} and {out / 'repository/opus-shape/1'}", file=sys.stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
