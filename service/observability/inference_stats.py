"""Inference statistics in the shape of Triton's statistics extension: counts and cumulative nanoseconds per model
view and version, recorded where the time really goes.

Two kinds of records, both cheap (a lock and a few additions), safe from the event loop and the engine threads:
- a request (``request``): through the Open Inference Protocol's infer; its end-to-end time (``success`` or
  ``fail``), and for a success where its time went: ``queue`` (its sentences waited for the engine), ``compute_input``
  (sentence splitting and tokenization), ``compute_infer`` (from its first sentence taken by the engine to its last
  one answered: encoder, decoder and detokenization, in however many batches or decoder steps), ``compute_output``
  (putting sentences back into texts, quality checks, building the response). Its texts count as inferences.
- an execution (``execution``): one engine batch, or one decoder step with continuous batching, of a model version's
  work, from any API (an execution is shared by whoever's sentences it holds); its batch size (sentences, or live
  rows) and engine seconds, in ``batch_stats``. Input and output work happen per request, outside executions, so
  ``batch_stats``' compute_input and compute_output count the executions with 0 ns.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

STAGES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float, count: int = 1) -> None:
        self.count += count
        self.ns += max(0, round(seconds * 1e9))

    def json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class RequestTiming:
    """Where one request's time went, filled as it is served: the scheduler adds ``queue_s`` and ``infer_s`` (service/
    scheduling/scheduler.py), the serving layer ``input_s``."""

    queue_s: float = 0.0
    input_s: float = 0.0
    infer_s: float = 0.0


@dataclass
class ViewStats:
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    stages: dict[str, Duration] = field(default_factory=lambda: {s: Duration() for s in STAGES})
    batches: dict[int, Duration] = field(default_factory=dict)  # batch size -> engine time of its executions

    def json(self, name: str, version: str) -> dict[str, Any]:
        batch_stats = [
            {
                "batch_size": size,
                "compute_input": {"count": d.count, "ns": 0},
                "compute_infer": d.json(),
                "compute_output": {"count": d.count, "ns": 0},
            }
            for size, d in sorted(self.batches.items())
        ]
        return {
            "name": name,
            "version": version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.json(),
                "fail": self.fail.json(),
                **{stage: d.json() for stage, d in self.stages.items()},
                "cache_hit": {"count": 0, "ns": 0},  # Triton's response cache: none here
                "cache_miss": {"count": 0, "ns": 0},
            },
            "batch_stats": batch_stats,
        }


class InferenceStatistics:
    """The statistics of every (model, kind, version) seen; kind is "translate" or "embed" (the v2 views)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: dict[tuple[str, str, str], ViewStats] = {}

    def _view(self, model: str, kind: str, version: str) -> ViewStats:
        return self._views.setdefault((model, kind, version), ViewStats())

    def request(
        self, model: str, kind: str, version: str, ok: bool, total_s: float, timing: RequestTiming, inferences: int
    ) -> None:
        """One request finished (``ok``) or failed after ``total_s`` seconds; ``timing`` says where a success's time
        went (compute_output is what remains of ``total_s``)."""
        with self._lock:
            view = self._view(model, kind, version)
            view.last_inference_ms = int(time.time() * 1000)
            if not ok:
                view.fail.add(total_s)
                return
            view.success.add(total_s)
            view.inference_count += inferences
            stages = view.stages
            stages["queue"].add(timing.queue_s)
            stages["compute_input"].add(timing.input_s)
            stages["compute_infer"].add(timing.infer_s)
            stages["compute_output"].add(max(0.0, total_s - timing.queue_s - timing.input_s - timing.infer_s))

    def execution(self, model: str, kind: str, version: str, batch_size: int, seconds: float) -> None:
        """One engine execution (a batch, or a decoder step) of ``batch_size`` sentences or rows took ``seconds``."""
        with self._lock:
            view = self._view(model, kind, version)
            view.execution_count += 1
            view.batches.setdefault(batch_size, Duration()).add(seconds)

    def snapshot(self, model: str, kind: str, version: str, name: str) -> dict[str, Any]:
        """One view's statistics as Triton's ``model_stats`` entry named ``name`` (zeros before its first request)."""
        with self._lock:
            return self._views.get((model, kind, version), ViewStats()).json(name, version)
