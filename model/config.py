"""Configuration dataclasses: one per concern, saved with every checkpoint and bundle."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

POSITIONAL_ENCODINGS = ("sinusoidal", "learned", "relative", "xl_relative")
ATTENTIONS = ("vanilla", "sparse", "linear")
NORM_PLACEMENTS = ("post", "pre")
ACTIVATIONS = ("relu", "gelu", "swish", "swiglu", "geglu")
SINUSOIDAL_LAYOUTS = ("interleaved", "halves")
AUTOCASTS = ("", "bf16", "fp16", "auto")
DEVICES = ("", "cpu", "cuda")


@dataclass
class ModelConfig:
    """Shape of the encoder-decoder Transformer (Vaswani et al. 2017 defaults, scaled down)."""

    vocab_size: int = 8000
    d_model: int = 256
    n_heads: int = 4
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1  # on each sublayer's output and on the embedding sums (Vaswani et al. 2017, 5.4)
    attention_dropout: float = 0.0
    # inside the feed-forward sublayer, after the activation (fairseq's activation_dropout; the paper has none there);
    # None: the same as dropout, which is what every model trained before this option had
    activation_dropout: float | None = None
    max_positions: int = 256
    positional_encoding: str = "sinusoidal"  # sinusoidal | learned | relative (Shaw) | xl_relative (Transformer-XL)
    relative_max_distance: int = 16  # k of Shaw et al. 2018 (clip distance)
    # self-attention (encoder and decoder; cross-attention is always vanilla): vanilla softmax over every key |
    # sparse: softmax over a position pattern (model/sparse_attention.py) | linear: elu(x) + 1 kernel
    # (model/linear_attention.py)
    attention: str = "vanilla"
    sparse_window: int = 8  # sparse: query i sees keys j with |i - j| <= window (decoder: i - window <= j <= i)
    sparse_stride: int = 0  # sparse: and keys whose distance |i - j| is a multiple of the stride (0: none)
    sparse_global: int = 0  # sparse: the first n positions see and are seen by every position (0: none)
    norm_placement: str = "post"  # post (original) | pre (with final LayerNorm)
    activation: str = "relu"  # relu | gelu | swish (silu, OPUS-MT) | swiglu | geglu
    # the sinusoidal table's columns: interleaved PE(i, 2j) = sin, PE(i, 2j+1) = cos (Vaswani et al.) | halves: the
    # sines of every frequency, then the cosines (Marian, fairseq; imported models)
    sinusoidal_layout: str = "interleaved"
    scale_embedding: bool = True  # embeddings times sqrt(d_model) before the positions are added (Marian may not)
    output_bias: bool = False  # a bias on the output projection (Marian's final_logits_bias)
    # target ids never generated: their log-probabilities are set to -inf after the log-softmax, so the others keep
    # their values (Hugging Face's bad_words_ids of one token; an imported Marian model's pad, its decoder start)
    banned_ids: list[int] = field(default_factory=list)
    tie_embeddings: bool = True  # shared source/target/output embedding over a joint vocabulary
    layer_norm_eps: float = 1e-5  # every LayerNorm's epsilon (torch's default; an imported model may name another)
    # the encoder reads the source's EOS (appended by the engine); False: it is masked like padding, for a model that
    # never saw one (an Argos / CTranslate2 package whose config says add_source_eos false, OpenNMT-py's models)
    source_eos: bool = True
    pad_id: int = PAD_ID  # the special ids are the tokenizer's (core/tokenizer.py)
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        for name, value, allowed in (
            ("positional_encoding", self.positional_encoding, POSITIONAL_ENCODINGS),
            ("norm_placement", self.norm_placement, NORM_PLACEMENTS),
            ("activation", self.activation, ACTIVATIONS),
            ("attention", self.attention, ATTENTIONS),
            ("sinusoidal_layout", self.sinusoidal_layout, SINUSOIDAL_LAYOUTS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if self.attention == "linear" and self.positional_encoding in ("relative", "xl_relative"):
            raise ValueError(
                f"linear attention has no score matrix for {self.positional_encoding} positions to enter: "
                "use sinusoidal or learned positions"
            )
        if self.attention == "linear" and self.attention_dropout > 0:
            raise ValueError("attention_dropout drops attention weights; linear attention computes none: set it to 0")
        if any(not 0 <= i < self.vocab_size for i in self.banned_ids):
            raise ValueError(f"banned_ids {self.banned_ids} must be ids of the {self.vocab_size}-token vocabulary")
        if self.activation_dropout is not None and not 0.0 <= self.activation_dropout < 1.0:
            raise ValueError(f"activation_dropout has to be in [0, 1) or null, got {self.activation_dropout}")
        if self.sparse_window < 0 or self.sparse_stride < 0 or self.sparse_global < 0:
            raise ValueError("sparse_window, sparse_stride and sparse_global must be >= 0")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn_dropout(self) -> float:
        """The dropout inside the feed-forward sublayer: activation_dropout, or dropout where it is None."""
        return self.dropout if self.activation_dropout is None else self.activation_dropout

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown model config keys: {sorted(unknown)}")
        return cls(**data)


@dataclass
class TrainConfig:
    """Optimisation and bookkeeping settings of one training run."""

    max_tokens: int = 2500  # token budget of one batch (source or target, whichever is longer)
    max_length: int = 100  # sentences longer than this (in subwords) are dropped from training
    label_smoothing: float = 0.1
    lr_factor: float = 1.0  # multiplies the Noam rate
    warmup_steps: int = 1000
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    clip_norm: float = 1.0
    epochs: int = 20
    max_steps: int = 0  # 0 = no step limit
    eval_every: int = 500  # steps between validation runs
    # also write checkpoints/last.pt this often between validations (0: only at validations), so a run killed
    # at the end of a session loses at most these minutes; such saves add nothing to the averaged checkpoints
    save_minutes: float = 0.0
    keep_checkpoints: int = 5  # last N kept for averaging
    bleu_beam_size: int = 1  # beam used for validation BLEU (greedy is fast)
    bleu_max_sentences: int = 0  # 0 = the whole validation set
    seed: int = 1234
    threads: int = 0  # torch intra-op threads; 0 = leave torch's default
    # "bf16": forward pass under autocast to bfloat16 (weights, optimizer and loss stay float32); on a CPU it pays
    # off only with bfloat16 instructions (AVX512_BF16 / AMX): bench/train_speed.py measures it. "fp16": float16
    # with a gradient scaler, CUDA only. "auto": bf16 on such a CPU, float32 on other CPUs; on CUDA bf16 where
    # the GPU has it, else fp16 (a run resumed on another machine keeps its speed). model/precision.py
    autocast: str = ""
    # batches per update: their gradients are summed and the loss is divided by the target tokens of all of them
    # (on every rank), so N batches of B tokens make the update one batch of N x B tokens would
    accumulate: int = 1
    device: str = ""  # "" = cuda (cuda:LOCAL_RANK under torchrun) where a GPU is visible, else cpu | cpu | cuda
    # a folder written by ``python -m model.cli shard``: training pairs streamed from its memory-mapped shards
    # (model/shards.py) instead of read and encoded into memory; "" = the corpus folder's train split in memory
    shards: str = ""
    init_from: str = ""  # a released model folder whose weights (and tokenizer) a fresh run starts from


@dataclass
class TokenizerConfig:
    vocab_size: int = 8000
    model_type: str = "bpe"
    character_coverage: float = 1.0
    # pieces kept whole (model/directions.py's target-language tags); they are left out of the text it learns from
    user_symbols: list[str] = field(default_factory=list)


@dataclass
class RunConfig:
    """Everything a config file holds: data files, tokenizer, model and training settings."""

    name: str = "run"
    source_lang: str = "de"
    target_lang: str = "en"
    train_prefix: str = "train"
    valid_prefix: str = "val"
    test_prefix: str = "test_2016_flickr"
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        data = json.loads(Path(path).read_text())
        return cls(
            **{k: v for k, v in data.items() if k not in ("tokenizer", "model", "train")},
            tokenizer=TokenizerConfig(**data.get("tokenizer", {})),
            model=ModelConfig.from_dict(data.get("model", {})),
            train=_train_config(data.get("train", {})),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _train_config(data: dict[str, Any]) -> TrainConfig:
    if "adam_betas" in data:
        data = {**data, "adam_betas": tuple(data["adam_betas"])}
    cfg = TrainConfig(**data)
    if cfg.autocast not in AUTOCASTS:
        raise ValueError(f"autocast must be one of {AUTOCASTS}, got {cfg.autocast!r}")
    if cfg.device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {cfg.device!r}")
    if cfg.accumulate < 1:
        raise ValueError(f"accumulate must be >= 1, got {cfg.accumulate}")
    return cfg
