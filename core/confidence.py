"""A translation's confidence in [0, 1]: a logistic map of one per-sentence feature, fitted per model.

The feature is the mean log-probability of the generated tokens (EOS included), the model's own score divided
by the number of decisions it made. ``export/confidence.py`` fits the map on the validation split, as the
probability that the sentence's chrF against its reference is at least the threshold it was fitted for, and
stores the parameters in the bundle's manifest (``confidence``); the service applies them to every translation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def mean_log_prob(score: float, n_tokens: int) -> float:
    """The feature: score (sum of log-probabilities, EOS included) per generated token + EOS."""
    return score / (n_tokens + 1)


def confidence_of(feature: float, params: Mapping[str, Any]) -> float:
    """The fitted map: sigmoid(a * feature + b)."""
    z = params["a"] * feature + params["b"]
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def confidence(score: float, n_tokens: int, params: Mapping[str, Any]) -> float:
    """P(chrF >= threshold) for a translation with this score and length, from the fitted ``params`` (a, b)."""
    return confidence_of(mean_log_prob(score, n_tokens), params)
