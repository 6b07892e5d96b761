"""Batching between the serving layer and the engine: one scheduler per model.

Requests are split into sentences; sentences with equal keys (the work's frozen options) are merged into engine
work that ``service/scheduling/batch_policy.py`` (pure functions, no threads) chooses and times. The package, bottom up:

- ``errors``: what work is refused or failed with (imported by the worker, the serving layer and the APIs);
- ``runners``: the Protocols of what runs the work (a batch runner, a live decode);
- ``tickets``: a request as the schedulers hold it, answered once, in order, heard by its listener;
- ``queue``: ``RequestQueue``, one model's waiting sentences: admission and refusal, taking work (and marking it
  started), recording what a batch produced or how it failed; no thread of its own;
- ``scheduler``: ``Scheduler``, what the serving layer submits to: the queue and a driver, composed;
- ``dynamic`` and ``continuous``: the drivers, which decide when the queued work runs and on which thread.

As in vLLM v1, where a thread-free ``SchedulerInterface`` (schedule, update_from_output) is driven by separate
engine cores, the state and its bookkeeping have no threads; only the drivers own an asyncio task, worker threads
or an engine thread. Nothing here knows HTTP: the APIs map the errors to status codes (service/api/errors.py).
"""
