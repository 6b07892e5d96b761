"""Released weights round trip, training-state files and checkpoint averaging."""

from __future__ import annotations

import json

import pytest
import torch
from model_toys import EOS, PAD, tiny_config

from model.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    average_state_dicts,
    load_release,
    load_training_state,
    save_release,
    save_training_state,
)
from model.decoding import beam_search, greedy_search
from model.transformer import Transformer


@pytest.mark.parametrize(
    "overrides",
    [{}, {"positional_encoding": "learned", "tie_embeddings": False, "norm_placement": "pre", "activation": "geglu"}],
)
def test_release_round_trip_gives_identical_outputs(tmp_path, overrides):
    torch.manual_seed(0)
    model = Transformer(tiny_config(**overrides)).eval()
    with torch.no_grad():  # move every weight away from its initial value
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    save_release(tmp_path / "release", model, {"step": 42})
    assert (tmp_path / "release" / WEIGHTS_FILE).is_file()
    meta = json.loads((tmp_path / "release" / CONFIG_FILE).read_text())
    assert meta["step"] == 42 and meta["model"] == model.cfg.to_dict()

    torch.manual_seed(1)  # a different initialisation: the weights must come from the file
    loaded, meta = load_release(tmp_path / "release")
    assert not loaded.training
    assert loaded.cfg == model.cfg
    src = torch.tensor([[5, 6, 7, EOS], [8, EOS, PAD, PAD]])
    tgt = torch.tensor([[1, 4, 5], [1, 6, 7]])
    with torch.no_grad():
        assert torch.equal(loaded(src, tgt), model(src, tgt))
    assert [h.tokens for h in greedy_search(loaded, src, 6)] == [h.tokens for h in greedy_search(model, src, 6)]
    assert [n[0].tokens for n in beam_search(loaded, src, 2, 6)] == [n[0].tokens for n in beam_search(model, src, 2, 6)]
    if model.cfg.tie_embeddings:
        assert loaded.output.weight is loaded.src_embed.weight


def test_training_state_round_trip(tmp_path):
    state = {"model": Transformer(tiny_config()).state_dict(), "step": 3, "history": "[]"}
    save_training_state(tmp_path / "a.pt", state)
    assert not (tmp_path / "a.tmp").exists()
    loaded = load_training_state(tmp_path / "a.pt")
    assert loaded["step"] == 3
    assert all(torch.equal(loaded["model"][k], v) for k, v in state["model"].items())


def test_average_of_two_checkpoints_is_the_elementwise_mean(tmp_path):
    torch.manual_seed(0)
    a, b = Transformer(tiny_config()), Transformer(tiny_config())
    save_training_state(tmp_path / "a.pt", {"model": a.state_dict(), "step": 1})
    save_training_state(tmp_path / "b.pt", {"model": b.state_dict(), "step": 2})
    averaged = average_state_dicts([tmp_path / "a.pt", tmp_path / "b.pt"])
    sa, sb = a.state_dict(), b.state_dict()
    assert averaged.keys() == sa.keys()
    for name, value in averaged.items():
        assert value.dtype == sa[name].dtype
        torch.testing.assert_close(value, (sa[name] + sb[name]) / 2, atol=1e-7, rtol=1e-6)
    assert not torch.equal(averaged["encoder_layers.0.ffn.w1.weight"], sa["encoder_layers.0.ffn.w1.weight"])
    model = Transformer(tiny_config())
    model.load_state_dict(averaged)  # loads back into the model
    # The average of one checkpoint is that checkpoint.
    single = average_state_dicts([tmp_path / "a.pt"])
    assert all(torch.equal(single[k], v) for k, v in sa.items())
