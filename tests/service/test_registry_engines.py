"""The engines the registry builds follow MT_SEARCH_LOOP: a search loop for lone sentences in whole-batch search
with every scheduler (continuous batching runs blocked requests that do not stream in whole batches), none when the
setting is off."""

from __future__ import annotations

import pytest

from core.bundle import load_bundle
from service.models.registry import Registry
from service.observability.metrics import Metrics
from service.settings import Settings


@pytest.mark.parametrize(
    "scheduler, setting, loop",
    [("dynamic", "true", True), ("off", "true", True), ("continuous", "true", True), ("dynamic", "false", False)],
)
def test_the_search_loop_follows_the_setting_and_the_scheduler(tiny_bundle_dir, monkeypatch, scheduler, setting, loop):
    monkeypatch.setenv("MT_SCHEDULER", scheduler)
    monkeypatch.setenv("MT_SEARCH_LOOP", setting)
    monkeypatch.setenv("MT_PROVIDERS", "cpu")
    engine = Registry(Settings(), Metrics())._engine(load_bundle(tiny_bundle_dir))
    assert (engine.search_loop is not None) == loop
    (answer,) = engine.translate(["der hund"])
    assert answer.text
