"""Helpers for the HTTP tests: Prometheus scrapes, concurrent requests, toy inputs for the tiny model."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families
from tiny_bundle import GERMAN, SAMPLE_SENTENCES

WORDS = sorted(set(GERMAN.split()))


def toy_sentence(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def toy_sentences(n: int, seed: int = 0, min_words: int = 1, max_words: int = 10) -> list[str]:
    rng = random.Random(seed)
    return [toy_sentence(rng, rng.randint(min_words, max_words)) for _ in range(n)]


SAMPLES = list(SAMPLE_SENTENCES)


class Scrape:
    """One /metrics scrape: families by name and every sample's value by (name, labels)."""

    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: list[tuple[str, dict[str, str], float]] = [
            (s.name, dict(s.labels), s.value) for f in self.families.values() for s in f.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels`` (0 when there are none)."""
        return sum(v for n, lab, v in self.samples if n == name and all(lab.get(k) == x for k, x in labels.items()))

    def label_values(self, name: str, label: str) -> set[str]:
        return {lab[label] for n, lab, _ in self.samples if n == name and label in lab}


def scrape(url: str) -> Scrape:
    response = httpx.get(url + "/metrics", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape(response.text)


def post_concurrently(url: str, path: str, bodies: Sequence[dict], timeout: float = 120.0) -> list[httpx.Response]:
    """Send every body at once (one connection each) and return the responses in the order of ``bodies``."""

    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=len(bodies) + 1, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
            return await asyncio.gather(*(client.post(path, json=body) for body in bodies))

    return asyncio.run(run())


def batch_deltas(before: Scrape, after: Scrape, model: str = "de-en") -> tuple[float, float, float]:
    """(batches, sentences, batches of exactly one sentence) run between two scrapes."""
    labels = {"model": model}
    count = after.value("mt_batch_size_count", **labels) - before.value("mt_batch_size_count", **labels)
    total = after.value("mt_batch_size_sum", **labels) - before.value("mt_batch_size_sum", **labels)
    ones = after.value("mt_batch_size_bucket", le="1.0", **labels) - before.value(
        "mt_batch_size_bucket", le="1.0", **labels
    )
    return count, total, ones
