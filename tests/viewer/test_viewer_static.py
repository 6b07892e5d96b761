"""The viewer's page and assets over HTTP: served by the service itself, nothing fetched from elsewhere."""

from __future__ import annotations

import re

STATIC_LIMIT_BYTES = 64 * 1024
SVG_NAMESPACE = "http://www.w3.org/2000/svg"  # an identifier in heatmap.js, never fetched


def test_page_and_its_assets_are_served_and_self_contained(api):
    page = api.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="heatmap"' in page.text and 'id="translate-form"' in page.text
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sorted(assets) == [
        "/favicon.ico", "/static/documents.js", "/static/heatmap.js", "/static/viewer.css", "/static/viewer.js"
    ]  # fmt: skip
    total = len(page.content)
    for path in [a for a in assets if a != "/favicon.ico"]:  # the icon: test_viewer_first_contact.py
        asset = api.get(path)
        assert asset.status_code == 200, path
        kind = "text/css" if path.endswith(".css") else "javascript"
        assert kind in asset.headers["content-type"], path
        assert re.findall(r"(?:https?:)?//[\w.-]+\.\w+", asset.text.replace(SVG_NAMESPACE, "")) == [], path
        total += len(asset.content)
    assert re.findall(r"https?://", page.text) == []
    assert total < STATIC_LIMIT_BYTES
    assert api.get("/static/missing.js").status_code == 404


def test_page_and_assets_in_metrics(api):
    api.get("/")
    api.get("/static/viewer.js")
    metrics = api.get("/metrics").text
    assert re.search(r'mt_requests_total\{endpoint="/",model="",status="200"\} [1-9]', metrics)
    assert re.search(r'mt_requests_total\{endpoint="other",model="",status="200"\} [1-9]', metrics)
    assert "/static" not in metrics


def test_viewer_is_not_in_the_api_schema(api):
    paths = api.get("/openapi.json").json()["paths"]
    assert "/" not in paths and not any(p.startswith("/static") for p in paths)
