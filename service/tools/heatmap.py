"""Write an attention map as a PNG for reports, the same map the viewer at ``/`` draws.

    python -m service.tools.heatmap --url http://127.0.0.1:8000 --source "Ein Mann fährt Rad." \\
        [--target "A man rides a bike."] [--kind cross] [--layer 0] [--head mean] --out attention.png

Without --target the source is first translated (POST /v1/translate with --beam-size), as in the viewer;
then POST /v1/attention returns every layer and head of that source/target pair. The plotting is
``render_heatmap`` (matrix + tokens in, PNG out, no HTTP). matplotlib is imported only there: it is in the
``train`` extra, not a serving dependency.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from core.search import DEFAULT_BEAM

KINDS = ("cross", "encoder", "decoder")
Matrix = Sequence[Sequence[float]]


class ApiError(RuntimeError):
    """The service refused a request or could not be reached; the message says why."""


def describe_detail(detail: object) -> str:
    """The ``detail`` of an error answer in words; FastAPI's 422 list becomes 'field: msg; ...'."""
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = [str(p) for p in item.get("loc", []) if p != "body" and not isinstance(p, int)]
                parts.append(f"{'.'.join(loc)}: {item.get('msg')}" if loc else str(item.get("msg")))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


def post(url: str, path: str, body: dict, api_key: str | None = None, timeout: float = 60.0) -> dict:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url.rstrip("/") + path, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        try:
            detail = describe_detail(json.loads(exc.read()).get("detail"))
        except (ValueError, AttributeError):
            detail = exc.reason
        raise ApiError(f"{path} answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError) as exc:
        raise ApiError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None


def fetch_attention(
    url: str,
    source: str,
    target: str | None = None,
    model: str | None = None,
    beam_size: int = DEFAULT_BEAM,
    api_key: str | None = None,
    timeout: float = 60.0,
) -> dict:
    """The /v1/attention answer (all kinds, layers and heads) for source and its translation (or ``target``)."""
    if target is None:
        body = {"texts": [source], "model": model, "beam_size": beam_size}
        answer = post(url, "/v1/translate", body, api_key, timeout)
        target, model = answer["translations"][0]["text"], answer["model"]
    body = {"source": source, "target": target, "model": model, "kinds": list(KINDS)}
    return post(url, "/v1/attention", body, api_key, timeout)


def select(layers: Sequence, layer: int, head: int | str) -> np.ndarray:
    """One (rows, cols) map from [layers][heads][rows][cols]: a head, or the mean of the heads."""
    heads = np.asarray(layers[layer], dtype=np.float64)  # (heads, rows, cols)
    return heads.mean(axis=0) if head == "mean" else heads[int(head)]


def token_labels(attention: dict, kind: str) -> tuple[list[str], list[str]]:
    """Row and column tokens as the viewer labels them: cross rows are the generated tokens (then </s>)."""
    src, tgt = attention["source_tokens"], attention["target_tokens"]
    if kind == "cross":
        return [*tgt[1:], "</s>"], src
    if kind == "encoder":
        return src, src
    return tgt, tgt


def figure_size(n_rows: int, n_cols: int) -> tuple[float, float]:
    """Inches: room for the labels plus about 0.4 inch per token, never smaller than 4 x 3."""
    return max(4.0, 3.2 + 0.42 * n_cols), max(3.0, 1.8 + 0.36 * n_rows)


def render_heatmap(
    matrix: Matrix,
    row_tokens: Sequence[str],
    col_tokens: Sequence[str],
    out: str | Path,
    title: str = "",
    value_label: str = "attention weight",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    dpi: int = 100,
) -> Path:
    """Draw ``matrix`` (rows x cols) with viridis, token labels (columns on top) and a colour bar; save a PNG."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    except ImportError:
        raise ImportError("the PNG export needs matplotlib: pip install matplotlib (or the 'train' extra)") from None

    values = np.asarray(matrix, dtype=np.float64)
    if values.shape != (len(row_tokens), len(col_tokens)):
        raise ValueError(f"matrix is {values.shape} but there are {len(row_tokens)} x {len(col_tokens)} tokens")
    fig = Figure(figsize=figure_size(*values.shape), dpi=dpi, layout="constrained")
    ax = fig.add_subplot()
    top = vmax if vmax is not None else max(float(values.max()), 1e-6)
    image = ax.imshow(values, cmap="viridis", vmin=vmin, vmax=top, aspect="auto", interpolation="nearest")
    ax.xaxis.tick_top()
    ax.set_xticks(range(len(col_tokens)), labels=list(col_tokens), rotation=60, ha="left", rotation_mode="anchor")
    ax.set_yticks(range(len(row_tokens)), labels=list(row_tokens))
    ax.tick_params(length=0)
    if title:
        ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, label=value_label, shrink=0.9)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, format="png")
    return out


def _head(value: str) -> int | str:
    if value == "mean":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("--head takes a head index or 'mean'") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.tools.heatmap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the service (default: %(default)s)")
    parser.add_argument("--source", required=True, help="the sentence to translate")
    parser.add_argument("--target", help="a translation to score instead of the model's own")
    parser.add_argument("--model", help="model name (default: the service's default model)")
    parser.add_argument("--beam-size", type=int, default=DEFAULT_BEAM, help="beam size of the translation (default: 4)")
    parser.add_argument("--kind", choices=KINDS, default="cross")
    parser.add_argument("--layer", type=int, default=0, help="layer index; negative counts from the last (default 0)")
    parser.add_argument("--head", type=_head, default="mean", help="head index or 'mean' (default)")
    parser.add_argument("--out", type=Path, required=True, help="PNG file to write")
    parser.add_argument("--dpi", type=int, default=150)
    parser.add_argument("--api-key", default=os.environ.get("MT_API_KEY"), help="API key (default: $MT_API_KEY)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    args = parser.parse_args(argv)
    if not args.source.strip():
        parser.error("--source is empty")
    try:
        attention = fetch_attention(
            args.url, args.source, args.target, args.model, args.beam_size, args.api_key, args.timeout
        )
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    layers = attention[args.kind]
    n_layers, n_heads = len(layers), len(layers[0])
    if not -n_layers <= args.layer < n_layers:
        parser.error(f"--layer {args.layer}: the {args.kind} attention has {n_layers} layers (0..{n_layers - 1})")
    if args.head != "mean" and not 0 <= args.head < n_heads:
        parser.error(f"--head {args.head}: the model has {n_heads} heads (0..{n_heads - 1}) or 'mean'")
    layer = args.layer % n_layers
    rows, cols = token_labels(attention, args.kind)
    head = "mean of heads" if args.head == "mean" else f"head {args.head}"
    title = f"{attention['model']}: {args.kind} attention, layer {layer}, {head}\n{attention['target_text']}"
    out = render_heatmap(select(layers, layer, args.head), rows, cols, args.out, title=title, dpi=args.dpi)
    print(f"wrote {out} ({len(rows)} x {len(cols)}, {args.kind}, layer {layer}, {head})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
