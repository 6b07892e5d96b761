"""Import a Hugging Face ``MarianMTModel`` checkpoint (OPUS-MT) as our Transformer and tokenizer.

What Marian has that our Transformer names in its config (model/config.py): post-norm layers, static sinusoids laid
out in halves (``sinusoidal_layout``), ``scale_embedding``, ``final_logits_bias`` (``output_bias``), the FFN
activation the config names (OPUS-MT: swish), the pad token as decoder start and ``bad_words_ids`` of one token
(``banned_ids``, after the log-softmax, as ``generate`` bans them). The vocabulary is renumbered to our special ids
and each SentencePiece model is rewritten over our ids (export/marian_vocab.py).

Read: config.json, generation_config.json (optional), model.safetensors or pytorch_model.bin (loaded with
``weights_only=True``: nothing is unpickled), source.spm, target.spm, vocab.json, tokenizer_config.json (optional:
the languages). Refused with a message naming the field: anything this mapping does not compute exactly (separate
source/target vocabularies, multilingual target tokens, encoder and decoder of different widths, other activations,
multi-token bad words).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch

from export.marian_vocab import NORMAL, VocabMap, check_encoding, merged_sentencepiece, read_pieces, vocab_map
from model.config import ModelConfig
from model.transformer import Transformer

SOURCE = "imported: huggingface marian"  # the manifest's source (core/bundle.py Bundle.source)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}  # HF ACT2FN name -> ours
GENERATION_KEYS = ("max_length", "num_beams", "bad_words_ids", "length_penalty", "forced_eos_token_id")


class ImportRefused(ValueError):
    """The checkpoint uses something the import cannot map exactly; the message says what."""


@dataclass
class MarianImport:
    model: Transformer
    tokenizer_proto: bytes  # the source side's merged SentencePiece model (tokenizer.model)
    target_tokenizer_proto: bytes  # the target side's (target_tokenizer.model): glossary terms, given targets
    vocab: VocabMap
    source_language: str | None
    target_language: str | None
    generation: dict[str, Any]  # the checkpoint's generation defaults (max_length, num_beams, bad_words_ids, ...)
    config: dict[str, Any]  # config.json as read


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(directory / "model.safetensors"))
    if (directory / "pytorch_model.bin").is_file():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise ImportRefused(f"{directory}: no model.safetensors or pytorch_model.bin")


def model_config(config: dict[str, Any], vocab_size: int, banned_ids: list[int]) -> ModelConfig:
    """Our config of a MarianConfig (config.json); refuses what has no exact counterpart."""
    if config.get("model_type") != "marian":
        raise ImportRefused(f"config.json model_type is {config.get('model_type')!r}, not 'marian'")
    for ours, enc, dec in (
        ("n_heads", "encoder_attention_heads", "decoder_attention_heads"),
        ("d_ff", "encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if config[enc] != config[dec]:
            raise ImportRefused(f"{enc} {config[enc]} differs from {dec} {config[dec]}: our {ours} is one number")
    activation = config.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise ImportRefused(f"activation_function {activation!r}: only {sorted(ACTIVATIONS)} are mapped")
    if not config.get("share_encoder_decoder_embeddings", True):
        raise ImportRefused("share_encoder_decoder_embeddings false (separate vocabularies) is not imported yet")
    tied = config.get("tie_word_embeddings", True)
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=config["d_model"],
        n_heads=config["encoder_attention_heads"],
        n_encoder_layers=config["encoder_layers"],
        n_decoder_layers=config["decoder_layers"],
        d_ff=config["encoder_ffn_dim"],
        dropout=config.get("dropout", 0.1),
        attention_dropout=config.get("attention_dropout", 0.0),
        max_positions=config["max_position_embeddings"],
        positional_encoding="sinusoidal",
        sinusoidal_layout="halves",
        norm_placement="post",
        activation=ACTIVATIONS[activation],
        tie_embeddings=tied,
        scale_embedding=config.get("scale_embedding", False),
        output_bias=True,
        banned_ids=banned_ids,
    )


def banned_ids(generation: dict[str, Any], ours: dict[int, int]) -> list[int]:
    """Our ids of the checkpoint's ``bad_words_ids`` (one-token entries only: a ban that depends on the tokens
    before it is not a fixed set)."""
    out = []
    for entry in generation.get("bad_words_ids") or []:
        if len(entry) != 1 or entry[0] not in ours:
            raise ImportRefused(f"bad_words_ids entry {entry}: only single tokens of the vocabulary are imported")
        out.append(ours[entry[0]])
    return sorted(set(out))


def _tensor(weights: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    if name not in weights:
        raise ImportRefused(f"the checkpoint has no {name}")
    return weights[name]


def _rows(table: torch.Tensor, vmap: VocabMap) -> torch.Tensor:
    return table[torch.tensor(vmap.marian_ids)]


def load_weights(model: Transformer, weights: dict[str, torch.Tensor], config: dict[str, Any], vmap: VocabMap) -> None:
    """Copy Marian's tensors into ``model`` (our names), the vocabulary rows in our order."""
    shared = weights.get("model.shared.weight")
    encoder_embed = weights.get("model.encoder.embed_tokens.weight", shared)
    decoder_embed = weights.get("model.decoder.embed_tokens.weight", shared)
    if encoder_embed is None or decoder_embed is None:
        raise ImportRefused("the checkpoint has no token embeddings (model.shared.weight)")
    lm_head = decoder_embed if config.get("tie_word_embeddings", True) else _tensor(weights, "lm_head.weight")
    vocab = config["vocab_size"]
    bias = weights.get("final_logits_bias", torch.zeros(1, vocab)).reshape(-1)
    state: dict[str, torch.Tensor] = {
        "src_embed.weight": _rows(encoder_embed, vmap),
        "output.bias": _rows(bias, vmap).clone(),
    }
    state["output.bias"][vmap.excluded] = float("-inf")  # never generated: not part of Marian's distribution
    state["tgt_embed.weight"] = _rows(decoder_embed, vmap)  # tied: the same tensor, named again by state_dict
    state["output.weight"] = _rows(lm_head, vmap)
    attention = ("q_proj", "k_proj", "v_proj", "out_proj")
    parts = {
        "encoder_layers": [("self_attn", "self_attn", attention), ("attn_residual.norm", "self_attn_layer_norm", ())],
        "decoder_layers": [
            ("self_attn", "self_attn", attention),
            ("self_residual.norm", "self_attn_layer_norm", ()),
            ("cross_attn", "encoder_attn", attention),
            ("cross_residual.norm", "encoder_attn_layer_norm", ()),
        ],
    }
    for ours, theirs, n_layers in (
        ("encoder_layers", "model.encoder.layers", config["encoder_layers"]),
        ("decoder_layers", "model.decoder.layers", config["decoder_layers"]),
    ):
        for i in range(n_layers):
            ffn = [("ffn.w1", "fc1", ()), ("ffn.w2", "fc2", ()), ("ffn_residual.norm", "final_layer_norm", ())]
            pairs = [*parts[ours], *ffn]
            for our_module, their_module, subs in pairs:
                for sub in subs or ("",):
                    a = f"{ours}.{i}.{our_module}" + (f".{sub}" if sub else "")
                    b = f"{theirs}.{i}.{their_module}" + (f".{sub}" if sub else "")
                    for param in ("weight", "bias"):
                        state[f"{a}.{param}"] = _tensor(weights, f"{b}.{param}")
    expected = set(model.state_dict())
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise ImportRefused(f"weights do not fit: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    model.load_state_dict({k: v.float() for k, v in state.items()})


def import_marian(directory: str | Path) -> MarianImport:
    directory = Path(directory)
    config = _read_json(directory / "config.json")
    if not config:
        raise ImportRefused(f"{directory}: no config.json")
    tokenizer_config = _read_json(directory / "tokenizer_config.json")
    if tokenizer_config.get("separate_vocabs"):
        raise ImportRefused("tokenizer_config.json separate_vocabs: separate vocabularies are not imported yet")
    generation = {k: config[k] for k in GENERATION_KEYS if config.get(k) is not None}
    generation.update(
        {k: v for k, v in _read_json(directory / "generation_config.json").items() if k in GENERATION_KEYS}
    )
    for name in ("source.spm", "target.spm", "vocab.json"):
        if not (directory / name).is_file():
            raise ImportRefused(f"{directory}: no {name}")
    vocab = _read_json(directory / "vocab.json")
    codes = sorted(p for p in vocab if p.startswith(">>") and p.endswith("<<"))
    if codes:  # MarianTokenizer takes a leading >>xx<< of the text as one token; our tokenizer would spell it out
        raise ImportRefused(f"target language tokens {codes[:3]}...: multilingual models are not imported yet")
    if len(vocab) != config["vocab_size"]:
        raise ImportRefused(f"vocab.json has {len(vocab)} pieces, config.json vocab_size {config['vocab_size']}")
    protos = {side: (directory / f"{side}.spm").read_bytes() for side in ("source", "target")}
    pieces = {side: read_pieces(proto) for side, proto in protos.items()}
    pad = config["pad_token_id"]
    try:
        vmap = vocab_map(
            vocab,
            pieces["source"] + pieces["target"],
            config["eos_token_id"],
            pad,
            config.get("decoder_start_token_id", pad),
        )
    except ValueError as exc:  # vocab.json or the special ids do not fit the mapping: the message says how
        raise ImportRefused(str(exc)) from exc
    cfg = model_config(config, vmap.size, banned_ids(generation, vmap.ours()))
    model = Transformer(cfg)
    load_weights(model, read_weights(directory), config, vmap)
    model.eval()
    merged = {side: merged_sentencepiece(proto, vmap) for side, proto in protos.items()}
    for side, proto in merged.items():
        tokenizer = spm.SentencePieceProcessor(model_proto=proto)  # loads, or raises here rather than in the service
        # every piece of the side's model as a word, and all of them as one text: cut as Marian cuts them
        probe = [p.piece.replace("\u2581", " ") for p in pieces[side] if p.type == NORMAL]
        own = spm.SentencePieceProcessor(model_proto=protos[side])
        differing = check_encoding(tokenizer, own, vocab, vmap, [*probe, " ".join(probe)])
        if differing:
            raise ImportRefused(
                f"the merged {side} tokenizer cuts {len(differing)} texts unlike {side}.spm, e.g. {differing[0]!r}"
            )
    return MarianImport(
        model=model,
        tokenizer_proto=merged["source"],
        target_tokenizer_proto=merged["target"],
        vocab=vmap,
        source_language=tokenizer_config.get("source_lang"),
        target_language=tokenizer_config.get("target_lang"),
        generation=generation,
        config=config,
    )
