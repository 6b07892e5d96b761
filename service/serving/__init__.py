"""The serving layer: one module per endpoint, between the HTTP routes and the scheduler.

Each endpoint's request crosses it once, down and back up: text -> subword ids (``tokenize``, the one path
with the model's length check) -> typed work submitted to the model's scheduler (``run_work``) -> results
-> the response dict. It knows nothing of HTTP: a route hands it a ``RequestContext`` and the parsed body.
"""
