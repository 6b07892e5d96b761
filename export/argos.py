"""Import an Argos Translate package (``.argosmodel``: a CTranslate2 Transformer and its SentencePiece model) as our
Transformer and tokenizer.

The package is a zip with one top folder holding ``metadata.json`` (languages, package version), ``model/`` (a
CTranslate2 model: ``model.bin``, its ``config.json``, ``shared_vocabulary.json`` or ``.txt``),
``sentencepiece.model``, and sometimes ``stanza/`` (Argos's sentence splitter: not used here) and a README or
LICENSE naming the model's licence (recorded in the manifest).

``model.bin`` is read by export/ctranslate2_model.py, int8 / int16 weights de-quantized (``q / scale`` per row, as
CTranslate2 does for ``compute_type="float32"``); its TransformerSpec variables map onto our Transformer:

- ``{encoder,decoder}/layer_i/self_attention/linear_0``: fused Q, K, V rows -> ``self_attn.{q,k,v}_proj``;
  ``linear_1`` -> ``out_proj``; decoder ``attention/linear_0`` (Q), ``linear_1`` (fused K, V), ``linear_2`` ->
  ``cross_attn``; ``ffn/linear_0``, ``linear_1`` -> ``ffn.w1``, ``w2``; each block's ``layer_norm`` -> its
  residual's norm (post-norm: after the residual sum; pre-norm: before the sublayer, with ``{encoder,decoder}/
  layer_norm`` as our final norms);
- ``position_encodings/encodings``: the table itself, as our learned positions (exact whatever its layout);
- ``embeddings_0`` / ``embeddings`` / ``projection``: one joint vocabulary renumbered to our special ids
  (export/marian_vocab.py ``renumbered``), the projection's bias (zeros without one) -inf on rows CTranslate2 does not
  have (a padding piece it has stays in the softmax and is banned after it, as a trained model never outputs it);
  ``scale_embeddings`` sqrt(d_model) or none; ``start_from_zero_embedding`` (a converted Marian model): our decoder
  start embeds as zeros;
- attributes: ``num_heads``, ``pre_norm``, ``activation`` (ReLU, swish, GELU), config.json ``layer_norm_epsilon``
  (CTranslate2's default 1e-5) and ``add_source_eos`` (Argos feeds SentencePiece pieces without ``</s>``: such a
  model's encoder never sees one, ModelConfig.source_eos false).

Anything else in model.bin (relative positions, RMS norm, layernorm_embedding, multi-query attention, rotary or
ALiBi positions, separate source / target vocabularies, a second source embedding) is refused with its name.
"""

from __future__ import annotations

import io
import json
import math
import re
import zipfile
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import numpy as np
import torch

from core.tokenizer import BOS_ID, PAD_ID
from export.ctranslate2_model import CT2Model, ModelFormatError, read_model
from export.marian import ImportRefused
from export.marian_vocab import VocabMap, read_pieces, renumbered
from model.config import ModelConfig
from model.transformer import Transformer

SOURCE = "imported: argos ctranslate2"  # the manifest's source (core/bundle.py Bundle.source)
ACTIVATIONS = {0: "relu", 2: "swish", 3: "gelu"}  # ctranslate2.specs.common_spec.Activation -> ours (GELU: erf)
PAD_PIECES = ("<blank>", "<pad>")  # OpenNMT's and Hugging Face's padding pieces
# what Argos's translate() passes to CTranslate2 (argostranslate/translate.py): beam 4, length penalty 0.2; and
# CTranslate2's own max_decoding_length default; ranked by score / length ** penalty
ARGOS_DECODING = {"beam_size": 4, "length_penalty": 0.2, "max_length": 256, "length_penalty_form": "hf"}
# attributes whose value must be the one given (CTranslate2's default: nothing our model lacks)
PLAIN = {
    "encoder/embeddings_merge": None,  # with one source embedding the merge does nothing
    "encoder/multi_query_attention": 0,
    "decoder/alibi": 0,
    "decoder/alibi_use_positive_positions": None,
    "decoder/scale_alibi": None,
    "decoder/alignment_layer": None,  # which attention CTranslate2 returns as alignment: ours return all
    "decoder/alignment_heads": None,
}


@dataclass
class ArgosPackage:
    metadata: dict[str, Any]
    model: CT2Model
    config: dict[str, Any]  # model/config.json ({} when the package has none: CTranslate2's defaults)
    vocabulary: list[str]
    sentencepiece: bytes
    licence: dict[str, str]  # file name -> text of the package's README / LICENSE files
    files: list[str]


@dataclass
class ArgosImport:
    model: Transformer
    tokenizer_proto: bytes
    vocab: VocabMap
    package: ArgosPackage
    decoding: dict[str, Any]
    info: dict[str, Any]  # what the manifest's "imported" records about the mapping


def _vocabulary(files: dict[str, bytes], model_dir: str) -> list[str]:
    for name in ("source_vocabulary", "target_vocabulary"):
        if any(f"{model_dir}/{name}.{ext}" in files for ext in ("json", "txt")):
            raise ImportRefused(f"{model_dir}/{name}: separate source and target vocabularies are not imported yet")
    if f"{model_dir}/shared_vocabulary.json" in files:
        return json.loads(files[f"{model_dir}/shared_vocabulary.json"])
    if f"{model_dir}/shared_vocabulary.txt" in files:
        lines = files[f"{model_dir}/shared_vocabulary.txt"].decode("utf-8").split("\n")  # as CTranslate2 reads it
        return lines[:-1] if lines[-1] == "" else lines
    raise ImportRefused(f"{model_dir}: no shared_vocabulary.json or shared_vocabulary.txt")


def read_package(data: bytes) -> ArgosPackage:
    """The parts of an .argosmodel (the zip's bytes)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ImportRefused(f"not a zip archive ({exc}): an .argosmodel is one") from exc
    names = [n for n in archive.namelist() if not n.endswith("/")]
    meta = [n for n in names if PurePosixPath(n).name == "metadata.json" and len(PurePosixPath(n).parts) <= 2]
    if len(meta) != 1:
        raise ImportRefused(f"{len(meta)} metadata.json files at the package's top: an .argosmodel has one")
    top = str(PurePosixPath(meta[0]).parent)
    prefix = "" if top == "." else top + "/"
    files = {n[len(prefix) :]: archive.read(n) for n in names if n.startswith(prefix) and "/stanza/" not in f"/{n}"}
    model_dir = "model"
    if f"{model_dir}/model.bin" not in files:
        raise ImportRefused(f"no {prefix}model/model.bin: the package holds no CTranslate2 model")
    if "sentencepiece.model" not in files:
        raise ImportRefused(f"no {prefix}sentencepiece.model: only SentencePiece packages are imported")
    try:
        model = read_model(files[f"{model_dir}/model.bin"])
    except ModelFormatError as exc:
        raise ImportRefused(str(exc)) from exc
    if model.spec not in ("TransformerSpec", ""):
        raise ImportRefused(f"model.bin holds a {model.spec}: only TransformerSpec (encoder-decoder) is imported")
    config_bytes = files.get(f"{model_dir}/config.json")
    licence = {
        n: files[n].decode("utf-8", "replace")
        for n in sorted(files)
        if "/" not in n and n.split(".")[0].upper() in ("README", "LICENSE", "LICENCE", "COPYING")
    }
    return ArgosPackage(
        metadata=json.loads(files["metadata.json"]),
        model=model,
        config=json.loads(config_bytes) if config_bytes else {},
        vocabulary=_vocabulary(files, model_dir),
        sentencepiece=files["sentencepiece.model"],
        licence=licence,
        files=sorted(files),
    )


def _layers(model: CT2Model, stack: str) -> int:
    """How many ``{stack}/layer_<i>/`` the model has (``{stack}/layer_norm`` is the final norm, not a layer)."""
    return len({m.group(1) for n in model.names() if (m := re.match(rf"{stack}/layer_(\d+)/", n))})


def _scale_embedding(model: CT2Model, d_model: int) -> bool:
    """Whether embeddings are multiplied by sqrt(d_model): a flag (older specs) or the factor itself."""
    out = set()
    for stack in ("encoder", "decoder"):
        name = f"{stack}/scale_embeddings"
        if not model.has(name):
            out.add(True)  # the spec's default
            continue
        value = float(model.attribute(name))
        if model.stored[model.aliases.get(name, name)] != "float32":
            out.add(bool(value))
        elif abs(value - math.sqrt(d_model)) <= 1e-6 * math.sqrt(d_model):
            out.add(True)
        elif value == 1.0:
            out.add(False)
        else:
            raise ImportRefused(f"{name} {value}: only sqrt(d_model) or none are mapped")
    if len(out) != 1:
        raise ImportRefused("encoder and decoder scale their embeddings differently: our model scales both or neither")
    return out.pop()


def model_config(package: ArgosPackage, vocab_size: int, tied: bool, banned_ids: list[int]) -> ModelConfig:
    m, config = package.model, package.config
    for name, wanted in PLAIN.items():
        value = m.attribute(name)
        if wanted is not None and value not in (None, wanted):
            raise ImportRefused(f"{name} {value}: not mapped (only {wanted})")
    heads = {m.attribute(f"{s}/num_heads", m.attribute("num_heads")) for s in ("encoder", "decoder")}
    norms = {m.attribute(f"{s}/pre_norm", m.attribute("pre_norm", True)) for s in ("encoder", "decoder")}
    acts = {m.attribute(f"{s}/activation", m.attribute("activation", 0)) for s in ("encoder", "decoder")}
    for what, values in (("num_heads", heads), ("pre_norm", norms), ("activation", acts)):
        if len(values) != 1 or None in values:
            raise ImportRefused(f"encoder and decoder {what} {sorted(map(str, values))}: our model has one")
    (activation,) = acts
    if activation not in ACTIVATIONS:
        raise ImportRefused(f"activation {activation}: only {sorted(ACTIVATIONS)} (ReLU, swish, GELU) are mapped")
    if config.get("add_source_bos"):
        raise ImportRefused("config.json add_source_bos: a source BOS is not imported yet")
    table = m.weight("encoder/position_encodings/encodings") if m.has("encoder/position_encodings/encodings") else None
    if table is None:
        raise ImportRefused(
            "no encoder/position_encodings/encodings: positions computed by CTranslate2 at run time (or relative "
            "positions) are not imported"
        )
    d_model = table.shape[1]
    ffn = m.raw("encoder/layer_0/ffn/linear_0/weight").shape[0]
    eps = config.get("layer_norm_epsilon")
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_heads=int(next(iter(heads))),
        n_encoder_layers=_layers(m, "encoder"),
        n_decoder_layers=_layers(m, "decoder"),
        d_ff=ffn,
        dropout=0.0,
        max_positions=table.shape[0],
        positional_encoding="learned",
        norm_placement="pre" if next(iter(norms)) else "post",
        activation=ACTIVATIONS[activation],
        tie_embeddings=tied,
        scale_embedding=_scale_embedding(m, d_model),
        output_bias=True,
        banned_ids=banned_ids,
        layer_norm_eps=1e-5 if eps is None else float(eps),
        source_eos=bool(config.get("add_source_eos", False)),
    )


def vocabulary_map(package: ArgosPackage, zero_start: bool) -> tuple[VocabMap, dict[str, Any]]:
    """Our vocabulary over the package's (config.json's special pieces; CTranslate2's defaults without one), and
    what the manifest records of the choice."""
    config, vocab = package.config, package.vocabulary
    index: dict[str, int] = {}
    for i, piece in enumerate(vocab):
        index.setdefault(piece, i)
    named = {
        "unk": config.get("unk_token", "<unk>"),
        "eos": config.get("eos_token", "</s>"),
        "start": config.get("decoder_start_token", config.get("bos_token", "<s>")),
    }
    for role, piece in named.items():
        if piece not in index:
            raise ImportRefused(f"the vocabulary has no {piece!r} ({role} token of config.json)")
    pad = next((p for p in PAD_PIECES if p in index), None)
    unk, eos, start = (index[named[k]] for k in ("unk", "eos", "start"))
    pad_row = index[pad] if pad is not None else unk
    # the decoder start is an output of its own unless it is the end (a converted Marian model) or another special;
    # with a zero start embedding it is input only (our start row is zeros: in a shared table, its output row too)
    start_is_output = start not in (eos, unk, pad_row) and not zero_start
    # a padding piece of the vocabulary is an ordinary output to CTranslate2 (in its softmax): ours keeps its logit
    # and bans it after the log-softmax (banned_ids), so every other token's probability is CTranslate2's; without
    # one, our pad reads the unk row again and leaves the softmax (-inf bias), as do the aliases
    excluded = ([] if pad is not None else [PAD_ID]) + ([] if start_is_output else [BOS_ID])
    vmap = renumbered(vocab, [pad_row, start, eos, unk], excluded, read_pieces(package.sentencepiece))
    record = {"pad": pad, "decoder_start": named["start"], "start_from_zero_embedding": zero_start}
    return vmap, record


def _linear(m: CT2Model, scope: str, used: set[str]) -> tuple[torch.Tensor, torch.Tensor]:
    used.update({f"{scope}/weight", f"{scope}/weight_scale", f"{scope}/bias"})
    weight = torch.from_numpy(m.weight(f"{scope}/weight"))
    bias = m.weight(f"{scope}/bias") if m.has(f"{scope}/bias") else np.zeros(weight.shape[0], np.float32)
    return weight, torch.from_numpy(bias)


def _norm(state: dict, ours: str, m: CT2Model, scope: str, used: set[str]) -> None:
    if not m.has(f"{scope}/beta"):
        raise ImportRefused(f"{scope} has no beta: RMS norm is not mapped")
    used.update({f"{scope}/gamma", f"{scope}/beta"})
    state[f"{ours}.weight"] = torch.from_numpy(m.weight(f"{scope}/gamma"))
    state[f"{ours}.bias"] = torch.from_numpy(m.weight(f"{scope}/beta"))


def _attention(state: dict, ours: str, m: CT2Model, scope: str, fused: list[str], used: set[str]) -> None:
    """``fused``: which projections each of the scope's linear_i holds, in order (q, k, v; then out)."""
    for i, names in enumerate(fused):
        weight, bias = _linear(m, f"{scope}/linear_{i}", used)
        parts = names.split(",")
        for name, w, b in zip(parts, weight.chunk(len(parts)), bias.chunk(len(parts)), strict=True):
            state[f"{ours}.{name}.weight"], state[f"{ours}.{name}.bias"] = w, b


def layer_weights(m: CT2Model, cfg: ModelConfig, used: set[str]) -> dict[str, torch.Tensor]:
    """Our layers' parameters from the spec's (see the module docstring)."""
    state: dict[str, torch.Tensor] = {}
    qkv, out = "q_proj,k_proj,v_proj", "out_proj"
    for stack, n_layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n_layers):
            ours, theirs = f"{stack}_layers.{i}", f"{stack}/layer_{i}"
            residual = "attn_residual" if stack == "encoder" else "self_residual"
            _attention(state, f"{ours}.self_attn", m, f"{theirs}/self_attention", [qkv, out], used)
            _norm(state, f"{ours}.{residual}.norm", m, f"{theirs}/self_attention/layer_norm", used)
            if stack == "decoder":
                _attention(
                    state, f"{ours}.cross_attn", m, f"{theirs}/attention", ["q_proj", "k_proj,v_proj", out], used
                )
                _norm(state, f"{ours}.cross_residual.norm", m, f"{theirs}/attention/layer_norm", used)
            for j, name in enumerate(("w1", "w2")):
                state[f"{ours}.ffn.{name}.weight"], state[f"{ours}.ffn.{name}.bias"] = _linear(
                    m, f"{theirs}/ffn/linear_{j}", used
                )
            _norm(state, f"{ours}.ffn_residual.norm", m, f"{theirs}/ffn/layer_norm", used)
        if cfg.norm_placement == "pre":
            _norm(state, f"{stack}_norm", m, f"{stack}/layer_norm", used)
    return state


def _embedding_names(m: CT2Model) -> tuple[str, str, str]:
    if m.has("encoder/embeddings_1/weight"):
        raise ImportRefused("encoder/embeddings_1: several source embeddings (factors) are not imported")
    source = "encoder/embeddings_0/weight" if m.has("encoder/embeddings_0/weight") else "encoder/embeddings/weight"
    return source, "decoder/embeddings/weight", "decoder/projection/weight"


def load_weights(model: Transformer, m: CT2Model, vmap: VocabMap, zero_start: bool) -> None:
    cfg = model.cfg
    used = {"encoder/position_encodings/encodings", "decoder/position_encodings/encodings"}
    rows = torch.tensor(vmap.marian_ids)
    names = _embedding_names(m)
    used.update(names, {f"{n}_scale" for n in names})
    source, target, projection = (torch.from_numpy(m.weight(n))[rows].clone() for n in names)
    if zero_start:
        target[BOS_ID] = 0.0
        source[BOS_ID] = 0.0 if cfg.tie_embeddings else source[BOS_ID]  # tied: one table (no source holds BOS)
    bias = m.weight("decoder/projection/bias") if m.has("decoder/projection/bias") else np.zeros(len(m.raw(names[2])))
    used.add("decoder/projection/bias")
    state = layer_weights(m, cfg, used)
    state["output.bias"] = torch.from_numpy(np.asarray(bias, np.float32))[rows].clone()
    state["output.bias"][vmap.excluded] = float("-inf")  # rows CTranslate2 does not have, or never generates
    state["src_embed.weight"] = source
    state["tgt_embed.weight"] = source if cfg.tie_embeddings else target
    state["output.weight"] = source if cfg.tie_embeddings else projection
    state["positions.embedding.weight"] = torch.from_numpy(m.weight("encoder/position_encodings/encodings"))
    expected = set(model.state_dict())
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise ImportRefused(f"weights do not fit: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    model.load_state_dict(state)
    attributes = {"num_heads", "pre_norm", "activation", "scale_embeddings", "start_from_zero_embedding"}
    known = used | set(PLAIN) | {f"{s}/{a}" for s in ("encoder", "decoder") for a in attributes} | attributes
    unknown = sorted(m.names() - known)
    if unknown:
        raise ImportRefused(f"model.bin variables this import does not map: {unknown[:8]}")


def _tied(m: CT2Model) -> bool:
    """Source, target and output embeddings one table (aliased, or equal)."""
    tables = [m.raw(n) for n in _embedding_names(m)]
    return all(t.shape == tables[0].shape and np.array_equal(t, tables[0]) for t in tables[1:])


def import_argos(data: bytes, source_eos: bool | None = None) -> ArgosImport:
    """An .argosmodel's bytes as our Transformer and tokenizer (see the module docstring); ``source_eos``: whether the
    encoder reads a source EOS (None: config.json's add_source_eos, false without it)."""
    import sentencepiece as spm

    from export.marian_vocab import NORMAL, check_encoding, merged_sentencepiece

    package = read_package(data)
    m = package.model
    zero_start = bool(m.attribute("decoder/start_from_zero_embedding", False))
    vmap, record = vocabulary_map(package, zero_start)
    tied = _tied(m)
    decoder_table = m.weight("decoder/position_encodings/encodings")
    if not np.array_equal(decoder_table, m.weight("encoder/position_encodings/encodings")):
        raise ImportRefused("encoder and decoder position tables differ: our model has one")
    cfg = model_config(package, vmap.size, tied, [PAD_ID] if record["pad"] is not None else [])
    if source_eos is not None:
        cfg.source_eos = source_eos
    model = Transformer(cfg)
    load_weights(model, m, vmap, zero_start)
    model.eval()
    merged = merged_sentencepiece(package.sentencepiece, vmap)
    tokenizer = spm.SentencePieceProcessor(model_proto=merged)
    own = spm.SentencePieceProcessor(model_proto=package.sentencepiece)
    probe = [p.piece.replace("\u2581", " ") for p in read_pieces(package.sentencepiece) if p.type == NORMAL]
    index = {p: i for i, p in reversed(list(enumerate(package.vocabulary)))}
    differing = check_encoding(tokenizer, own, index, vmap, [*probe, " ".join(probe)])
    if differing:
        raise ImportRefused(f"the merged tokenizer cuts {len(differing)} texts unlike sentencepiece.model")
    max_length = min(ARGOS_DECODING["max_length"], cfg.max_positions - 1)
    info = {
        "package": package.metadata,
        "licence": package.licence,
        "files": package.files,
        "ctranslate2": {
            "binary_version": m.binary_version,
            "spec": m.spec,
            "revision": m.revision,
            "quantization": m.quantization(),
            "dequantized": m.quantization() not in ("float32",),
            "config": package.config,
        },
        "vocabulary": {
            "ct2_size": len(package.vocabulary),
            "size": vmap.size,
            "rows": vmap.marian_ids,
            "excluded": vmap.excluded,
            **record,
        },
        "source_eos": cfg.source_eos,
    }
    return ArgosImport(model, merged, vmap, package, {**ARGOS_DECODING, "max_length": max_length}, info)
