"""Engine fixtures: the tiny trained bundle's fp32 engine and the PyTorch model it was exported from (the shortlisted
copy of the bundle, ``shortlisted``, is in tests/conftest.py: the bench tests read it too)."""

from __future__ import annotations

import random

import pytest
from tiny_bundle import SAMPLE_SENTENCES, WORD_MAP

from core.bundle import load_bundle
from engine import Engine


@pytest.fixture(scope="session")
def fp32_engine(tiny_bundle_dir) -> Engine:
    return Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu", intra_op_threads=1)


@pytest.fixture(scope="session")
def reference_model(tiny_model_dir):
    """The PyTorch weights of the tiny bundle (one thread)."""
    import torch

    from model.checkpoint import load_release

    torch.set_num_threads(1)
    model, _ = load_release(tiny_model_dir / "release")
    return model


@pytest.fixture(scope="session")
def sentences() -> list[str]:
    """The sample sentences plus random word strings of 1..16 words (the tiny model's kind of input)."""
    rng = random.Random(11)
    words = sorted(WORD_MAP)
    extra = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 16))) for _ in range(19)]
    return SAMPLE_SENTENCES + extra
