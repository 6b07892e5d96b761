"""A document job whose work an engine restart lost (EngineRestarted: its worker process died with the job's sentences,
or the in-process engine was rebuilt) starts again from its first sentence instead of failing, a few times at most
(service/serving/document_jobs.py ``DocumentJobs._translate``)."""

from __future__ import annotations

import asyncio

import pytest

from service.observability.metrics import Metrics
from service.scheduling.errors import EngineRestarted
from service.serving import document_jobs
from service.serving.document_jobs import ENGINE_RESTARTS, DocumentJobs


def _jobs() -> DocumentJobs:
    return DocumentJobs(state=None, registry=None, metrics=Metrics(), settings=None, chunk=4)  # type: ignore[arg-type]


def _run(monkeypatch, failures: int) -> tuple[object, list[tuple[int, int]], int]:
    calls, progress_seen = [], []

    async def translate_units(model, plans, options, ctx, chunk, progress):
        calls.append(1)
        await progress(3, 10)  # some sentences were done before the engine died
        if len(calls) <= failures:
            raise EngineRestarted(0)
        return "translated"

    async def progress(done: int, total: int) -> None:
        progress_seen.append((done, total))

    monkeypatch.setattr(document_jobs, "translate_units", translate_units)
    result = asyncio.run(_jobs()._translate("job", None, [], None, progress))  # type: ignore[arg-type]
    return result, progress_seen, len(calls)


def test_a_job_whose_work_a_restart_lost_starts_again_from_its_first_sentence(monkeypatch):
    result, progress, calls = _run(monkeypatch, failures=2)
    assert result == "translated" and calls == 3
    assert progress == [(3, 10), (0, 0), (3, 10), (0, 0), (3, 10)]  # rewound to 0 before each new start


def test_a_job_that_keeps_losing_its_work_fails_after_the_last_attempt(monkeypatch):
    with pytest.raises(EngineRestarted):
        _run(monkeypatch, failures=ENGINE_RESTARTS + 1)
