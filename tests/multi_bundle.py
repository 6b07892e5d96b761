"""A tiny multilingual bundle (English, German, Chinese; target chosen by a tag), built by the tests themselves.

The corpus is a word-by-word 'translation' of random strings of a 15-word lexicon between the three languages, every
source line tagged with its target as model/directions.py ``tagged()`` writes it (``<2zh> der hund``); the tokenizer
is trained with the three tags as user symbols, a 1+1-layer Transformer learns all six directions in a few hundred
steps, and export.cli writes the bundle with ``--directions`` (de-zh and zh-de by pivot through English, as the
release would serve them when direct translation does not beat pivoting).
"""

from __future__ import annotations

import fcntl
import random
import shutil
from pathlib import Path

LEXICON = {
    "de": [
        "hund",
        "katze",
        "mann",
        "frau",
        "kind",
        "ball",
        "rot",
        "blau",
        "gross",
        "klein",
        "spielt",
        "rennt",
        "und",
        "im",
        "park",
    ],
    "en": [
        "dog",
        "cat",
        "man",
        "woman",
        "child",
        "ball",
        "red",
        "blue",
        "big",
        "small",
        "plays",
        "runs",
        "and",
        "in",
        "park",
    ],
    "zh": ["狗", "猫", "男人", "女人", "孩子", "球", "红", "蓝", "大", "小", "玩", "跑", "和", "在", "公园"],
}
TAGS = ["<2en>", "<2de>", "<2zh>"]
DIRECT = ["de-en", "en-de", "zh-en", "en-zh"]
DIRECTIONS = "de-en,en-de,zh-en,en-zh,de-zh:pivot=en,zh-de:pivot=en"
NAME = "multi"


def sentence(words: list[int], language: str) -> str:
    joined = "".join if language == "zh" else " ".join
    return joined(LEXICON[language][w] for w in words)


def write_corpus(directory: Path, n_train: int = 1500, n_valid: int = 8, seed: int = 0) -> Path:
    """``{train,val}.src`` (tagged sources) and ``.tgt``: each random word string in every direct direction."""
    from model.directions import tagged

    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("val", n_valid)):
        src, tgt = [], []
        for _ in range(n):
            words = [rng.randrange(len(LEXICON["en"])) for _ in range(rng.randint(1, 6))]
            for direction in DIRECT:
                s, t = direction.split("-")
                src.append(tagged(sentence(words, s), direction))
                tgt.append(sentence(words, t))
        (directory / f"{prefix}.src").write_text("\n".join(src) + "\n", encoding="utf-8")
        (directory / f"{prefix}.tgt").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return directory


def build_multi_bundle(work: Path, steps: int = 900) -> Path:
    """Train and export; returns the model repository folder that holds ``multi/1``."""
    import torch

    from export.cli import main as export_main
    from model.config import ModelConfig, RunConfig, TokenizerConfig, TrainConfig
    from model.train import Trainer

    torch.set_num_threads(1)
    corpus = write_corpus(work / "corpus")
    run = RunConfig(
        name="tiny-multi",
        source_lang="src",
        target_lang="tgt",
        test_prefix="val",
        tokenizer=TokenizerConfig(vocab_size=360, user_symbols=TAGS),
        model=ModelConfig(
            vocab_size=360,
            d_model=32,
            n_heads=2,
            n_encoder_layers=1,
            n_decoder_layers=1,
            d_ff=64,
            dropout=0.0,
            max_positions=64,
        ),  # fmt: skip
        train=TrainConfig(
            max_tokens=600,
            max_length=40,
            warmup_steps=50,
            lr_factor=0.5,
            epochs=40,
            max_steps=steps,
            eval_every=steps,
            keep_checkpoints=1,
            bleu_max_sentences=32,  # the whole validation split: 8 strings in 4 directions
            seed=3,
            threads=1,
        ),  # fmt: skip
    )
    trainer = Trainer.from_run(run, corpus, work / "run", progress=False)
    trainer.train()
    trainer.finalize()
    repo = work / "repository"
    args = ["export", "--model", str(work / "run" / "release"), "--out", str(repo / NAME / "1"), "--name", NAME]
    code = export_main([*args, "--variants", "fp32", "--directions", DIRECTIONS])
    assert code == 0
    return repo


def cached_multi_build(cache_root: Path, digest: str) -> Path:
    """The folder of the build (``corpus/``, ``run/`` with its ``release/``, ``repository/``), made once per source
    digest under ``cache_root``; read it, do not change it."""
    cached = cache_root / f"multi-bundle-{digest}"
    with open(cache_root / f"{cached.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cached / "complete").exists():
            if cached.exists():
                shutil.rmtree(cached)
            build_multi_bundle(cached)
            (cached / "complete").touch()
    return cached


def cached_multi_bundle(cache_root: Path, target: Path, digest: str) -> Path:
    """Build once per source digest (under ``cache_root``), copy into ``target``; returns target's repository."""
    shutil.copytree(cached_multi_build(cache_root, digest) / "repository", target / "repository")
    return target / "repository"


def run_data(build: Path, folder: Path) -> Path:
    """A stand-in for the run's prepared data folder, as the scripts read it: the build's training sources (int8
    calibration) and a prepare.json."""
    folder.mkdir()
    shutil.copy(build / "corpus" / "train.src", folder / "train.src")
    (folder / "prepare.json").write_text("{}\n")
    return folder


def source_digest() -> str:
    """What the cached bundle depends on: this file and the code that trains and exports it."""
    import hashlib

    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for folder in ("model", "export", "core"):
        for path in sorted((root / folder).glob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
