"""Helpers of the protocol tests."""

from __future__ import annotations


def v1_translate(api, texts: list[str], **options) -> list[dict]:
    """/v1's translations of ``texts``: what every other protocol must answer."""
    response = api.post("/v1/translate", json={"texts": texts, **options})
    assert response.status_code == 200, response.text
    return response.json()["translations"]
