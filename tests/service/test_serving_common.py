"""run_work without HTTP: work that meets a scheduler retired by a version swap runs on its replacement."""

from __future__ import annotations

import asyncio

import pytest

from service.execution.work import EmbedOptions, Source
from service.models.registry import LoadedModel
from service.observability.metrics import Metrics
from service.scheduling.batch_policy import BatchLimits
from service.scheduling.dynamic import dynamic_scheduler
from service.scheduling.errors import ShuttingDown
from service.serving.common import run_work
from service.serving.context import RequestContext


def _model(version: str, metrics: Metrics) -> LoadedModel:
    def runner(options, sources):
        return [f"v{version}:{s.ids}" for s in sources], {}

    scheduler = dynamic_scheduler("m", runner, BatchLimits(max_wait_s=0.0), metrics)
    bundle = type("FakeBundle", (), {"version": version})()
    return LoadedModel("m", bundle, None, scheduler, "fp32", 10)  # type: ignore[arg-type]


def test_work_follows_the_version_that_replaced_a_retired_scheduler():
    async def scenario():
        metrics = Metrics()
        old, new = _model("1", metrics), _model("2", metrics)
        old.scheduler.start()
        new.scheduler.start()
        before, used_before = await run_work(old, EmbedOptions(), [Source([5, 2])], RequestContext())
        old.replaced_by = new
        await old.scheduler.stop()
        after, used_after = await run_work(old, EmbedOptions(), [Source([6, 2])], RequestContext())
        await new.scheduler.stop()
        with pytest.raises(ShuttingDown):  # no replacement: the refusal stands (the service is draining)
            await run_work(new, EmbedOptions(), [Source([7, 2])], RequestContext())
        return before, used_before, after, used_after

    before, used_before, after, used_after = asyncio.run(scenario())
    assert before == ["v1:[5, 2]"] and used_before.version == "1"
    assert after == ["v2:[6, 2]"] and used_after.version == "2"
