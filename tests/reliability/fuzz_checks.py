"""Checks of schemathesis's runs that are ours: the pytest fuzzing (test_fuzz_schema.py) imports them, and the
schemathesis command line loads this module as its hooks (SCHEMATHESIS_HOOKS=fuzz_checks,
test_fuzz_phases.py), so both judge a response alike."""

from __future__ import annotations

import schemathesis


def _timeout_asked(case) -> float | None:
    body = case.body if isinstance(case.body, dict) else {}
    asked = [body.get("timeout_s")]
    parameters = body.get("parameters")
    if isinstance(parameters, dict) and isinstance(parameters.get("timeout"), int | float):
        asked.append(parameters["timeout"] / 1e6)  # the Open Inference Protocol's deadline, in microseconds
    for name, value in (case.headers or {}).items():
        if name.lower() == "x-request-timeout":
            asked.append(value)
    values = []
    for value in asked:
        try:
            values.append(float(value))
        except (TypeError, ValueError):
            continue
    return min(values) if values else None


@schemathesis.check
def no_server_error(ctx, response, case) -> None:
    """No 5xx, except the documented 504 for a deadline the client set shorter than the work (< 2 s)."""
    if response.status_code == 504:
        asked = _timeout_asked(case)
        assert asked is not None and asked < 2.0, f"504 with a deadline of {asked}: {response.text}"
        return
    assert response.status_code < 500, f"server error {response.status_code}: {response.text[:500]}"
