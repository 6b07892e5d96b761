"""Fixtures for the model package: a trained toy model and a tiny parallel corpus (one thread: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from model_toys import tiny_config, train_toy, write_corpus

from model.transformer import Transformer


@pytest.fixture(scope="session")
def reverse_model() -> Transformer:
    """A tiny Transformer trained (about 5 s on one thread) to reverse sequences of 3-6 symbols."""
    torch.manual_seed(0)
    model = Transformer(tiny_config())
    losses = train_toy(model, "reverse", steps=300)
    assert losses[-1] < 0.2, f"the toy model did not learn: final loss {losses[-1]:.3f}"
    return model


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))
