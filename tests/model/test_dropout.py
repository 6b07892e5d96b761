"""model/dropout.py: nn.Dropout's semantics (zero with probability p, the rest scaled by 1 / (1 - p), identity in
evaluation), its gradient, and the RNG it draws from (torch.manual_seed makes it repeatable)."""

from __future__ import annotations

import math

import pytest
import torch

from model.dropout import Dropout


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_a_value_is_dropped_with_probability_p_and_the_rest_scaled(p):
    torch.manual_seed(0)
    n = 1_000_000
    x = torch.rand(n) + 0.5  # no zeros of its own
    y = Dropout(p).train()(x)
    dropped = float((y == 0).float().mean())
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / n)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    assert abs(float(y.mean()) - float(x.mean())) < 0.01  # the expectation is kept


def test_the_gradient_is_the_mask_scaled():
    torch.manual_seed(1)
    x = torch.randn(64, 32, requires_grad=True)
    y = Dropout(0.25).train()(x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, (y.detach() != 0).float() / 0.75)


def test_evaluation_and_p_zero_are_the_identity_and_bfloat16_stays_bfloat16():
    x = torch.randn(4, 5)
    assert Dropout(0.3).eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    assert Dropout(0.3).train()(x.bfloat16()).dtype == torch.bfloat16
    with pytest.raises(ValueError):
        Dropout(1.0)


def test_the_seed_makes_it_repeatable():
    x = torch.randn(100)
    torch.manual_seed(5)
    a = Dropout(0.5).train()(x)
    torch.manual_seed(5)
    assert torch.equal(a, Dropout(0.5).train()(x))


def test_the_feed_forward_dropout_is_activation_dropout_else_dropout():
    from model_toys import tiny_config

    from model.transformer import Transformer

    def ffn_rates(**overrides):
        model = Transformer(tiny_config(**overrides))
        layers = [*model.encoder_layers, *model.decoder_layers]
        return {layer.ffn.dropout.p for layer in layers}, {layer.ffn_residual.dropout.p for layer in layers}

    assert ffn_rates(dropout=0.1) == ({0.1}, {0.1})  # None: what every model before the option had
    assert ffn_rates(dropout=0.1, activation_dropout=0.0) == ({0.0}, {0.1})
    assert ffn_rates(dropout=0.0, activation_dropout=0.3) == ({0.3}, {0.0})
    with pytest.raises(ValueError, match="activation_dropout"):
        tiny_config(activation_dropout=1.0)
