"""Bring a released bundle's graphs up to the current exporter where the change is a pure graph rewrite (issue 33).

A bundle's graphs are small protos beside its weights files. Some exporter changes rewrite only how a graph computes,
not what: their outputs are the same bit for bit. ``upgrade_bundle`` applies such rewrites in place to every
variant's graphs, leaves the weights files (and every other file) byte for byte as they were, records what it did in
the manifest (``upgrades``: the rewrite, the graphs, when, the code's commit) and seals it again. A graph that has
nothing to rewrite is left untouched, so upgrading twice changes nothing the second time.

Rewrites (docs/engine-speed-log.md names the measurement behind each):

- ``scatter_nd_cache_write`` (item 38): an interface-4 live step graph wrote each row's new key and value at the
  row's own cache column with ``ScatterElements`` (one index per element). The current exporter's ``write_columns``
  / ``write_column`` (export/decoder_step.py) write the same values with ``ScatterND`` (one [row, head, column]
  index per d_head slice), 4-10x faster on onnxruntime's CPU; the rewrite builds exactly those nodes.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import onnx

from core.bundle import MANIFEST
from core.graphs import step_interface
from export.decoder_step import write_column, write_columns
from export.graph_builder import GraphBuilder
from export.manifest import git_commit, seal
from export.onnx_export import graph_signature

log = logging.getLogger(__name__)

PREFIX = "upgrade."  # the new nodes' and constants' names: the graph's own names stay as they were


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output}


def _reads(node: onnx.NodeProto) -> set[str]:
    """The names ``node`` reads, its subgraphs' reads of outer names included (an ``If`` branch, a ``Loop`` body)."""
    names = {i for i in node.input if i}
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            made = {o for n in sub.node for o in n.output} | {i.name for i in sub.input}
            made |= {t.name for t in sub.initializer}
            names |= {name for n in sub.node for name in _reads(n) if name not in made}
    return names


def drop_unused(graph: onnx.GraphProto) -> int:
    """Remove the nodes and initializers nothing reads any more (graph outputs and subgraphs' outer reads count);
    returns how many nodes went."""
    removed = 0
    while True:
        read = {o.name for o in graph.output}
        for node in graph.node:
            read |= _reads(node)
        dead = [n for n in graph.node if not any(o in read for o in n.output)]
        if not dead:
            break
        kept = [n for n in graph.node if all(n is not d for d in dead)]
        del graph.node[:]
        graph.node.extend(kept)
        removed += len(dead)
    kept_init = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept_init)
    made = {o for n in graph.node for o in n.output}
    kept_info = [v for v in graph.value_info if v.name in made]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    return removed


def scatter_nd_cache_write(model: onnx.ModelProto, n_heads: int, d_head: int) -> int:
    """Rewrite ``model``'s ScatterElements cache writes (interface 4 before item 38) in place as the current
    exporter writes them; returns how many writes changed (0: nothing to do, the model untouched)."""
    graph = model.graph
    if step_interface({p.key: p.value for p in model.metadata_props}) < 4:  # not a live step graph: not ours
        return 0
    writes = [n for n in graph.node if n.op_type == "ScatterElements"]
    if not writes:
        return 0
    producer = _producers(graph)
    b = GraphBuilder(None, cfg=SimpleNamespace(n_heads=n_heads, d_head=d_head))
    columns = write_columns(b)
    replaced: dict[int, list[onnx.NodeProto]] = {}  # an old write -> the nodes that stand where it stood
    begin = 0  # the first old write's nodes start with write_columns'
    presents = {node.output[0] for node in writes}  # graph outputs: they keep their names
    for node in writes:
        padded, _, update = node.input  # update: (rows, heads, 1, d_head), the Transpose of a Reshape of the new
        pad, by_head = producer.get(padded), producer.get(update)  # key / value (rows, 1, d)
        if pad is None or pad.op_type != "Pad" or node.attribute[0].i != 2:
            raise ValueError(f"{node.name or node.output[0]}: not a cache write of the exporter's interface 4")
        new = update  # write_column's Reshape to (rows, heads, d_head) reads either layout in the same order
        if by_head is not None and by_head.op_type == "Transpose" and producer.get(by_head.input[0]) is not None:
            reshape = producer[by_head.input[0]]
            new = reshape.input[0] if reshape.op_type == "Reshape" else update  # then both go unused
        write_column(b, pad.input[0], new, columns, node.output[0])
        replaced[id(node)] = b.nodes[begin:]
        begin = len(b.nodes)
    # the builder's names may be the graph's own (the same exporter made both): every new one gets the prefix
    renamed = {o: PREFIX + o for n in b.nodes for o in n.output if o not in presents}
    renamed |= {t.name: PREFIX + t.name for t in b.initializers}
    taken = {o for n in graph.node for o in n.output} | {t.name for t in graph.initializer}
    if taken & set(renamed.values()):
        raise ValueError(f"the graph already has names starting {PREFIX!r}: rewritten by another tool?")
    for n in b.nodes:
        n.input[:] = [renamed.get(i, i) for i in n.input]
        n.output[:] = [renamed.get(o, o) for o in n.output]
        n.name = PREFIX + (n.name or n.output[0])
    for t in b.initializers:
        t.name = renamed[t.name]
    nodes = []
    for node in graph.node:  # each write's nodes where the old one stood: what they read is made by then
        nodes.extend(replaced.get(id(node), [node]))
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(b.initializers)
    drop_unused(graph)
    return len(writes)


REWRITES = {"scatter_nd_cache_write": scatter_nd_cache_write}


def upgrade_bundle(bundle_dir: Path, commit: str | None = None) -> dict[str, Any]:
    """Apply every rewrite to every variant's graphs of the bundle at ``bundle_dir`` in place; seal the manifest
    again when a graph changed, recording ``commit`` (default: the code's git commit, read before anything is
    written). Returns {rewrite: [graph files it changed]} (empty: the bundle was up to date)."""
    bundle_dir = Path(bundle_dir)
    commit = commit or git_commit()
    manifest = json.loads((bundle_dir / MANIFEST).read_text(encoding="utf-8"))
    cfg = manifest["model"]
    n_heads = int(cfg["n_heads"])
    d_head = int(cfg["d_model"]) // n_heads
    changed: dict[str, list[str]] = {}
    rewritten: dict[str, onnx.ModelProto] = {}  # written only once every graph rewrote: a refusal changes nothing
    for variant in manifest["variants"].values():
        for rel in variant.values():
            if not str(rel).endswith(".onnx"):
                continue
            model = onnx.load(str(bundle_dir / rel), load_external_data=False)  # the weights files stay untouched
            done = [name for name, rewrite in REWRITES.items() if rewrite(model, n_heads, d_head)]
            if done:
                rewritten[rel] = model
                for name in done:
                    changed.setdefault(name, []).append(rel)
    if not changed:
        return changed
    for rel, model in rewritten.items():
        onnx.save(model, str(bundle_dir / rel))
    fp32 = manifest["variants"].get("fp32", {})
    for key in manifest.get("graphs", {}):
        if key in fp32:
            manifest["graphs"][key] = graph_signature(bundle_dir / fp32[key])
    when = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    upgrades = manifest.get("upgrades", [])
    upgrades += [
        {"rewrite": name, "graphs": graphs, "at": when, "git_commit": commit} for name, graphs in changed.items()
    ]
    manifest["upgrades"] = upgrades
    manifest.pop("manifest_sha256", None)
    seal(bundle_dir, manifest)
    log.info("%s upgraded: %s", bundle_dir, changed)
    return changed
