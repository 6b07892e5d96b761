"""export/upgrade.py: a released bundle's live step graphs rewritten in place to the current exporter's cache write.

A legacy bundle is made from the tiny one by writing its live step graphs' cache columns the way the exporter did
before speed-log item 38 (ScatterElements, one index per element: ``_legacy_writes`` rebuilds those nodes as the
old ``write_columns`` / ``write_column`` built them). Upgrading it must give back the current exporter's nodes, leave
every other file byte for byte, seal the manifest, change nothing the second time, and compute the same values.
"""

from __future__ import annotations

import collections
import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from tiny_bundle import SAMPLE_SENTENCES, write_corpus

from bench.step_graphs import step_feeds
from core.bundle import MANIFEST, load_bundle
from core.graphs import LIVE_STEP
from engine import Engine
from engine.decoding import TranslateOptions
from engine.live import LiveBatch
from engine.step_inputs import ragged_inputs
from export.cli import main as export_main
from export.upgrade import drop_unused, upgrade_bundle


def _legacy_writes(path, n_heads: int, d_head: int) -> int:
    """Rewrite the graph file ``path``'s ScatterND cache writes as the exporter wrote them before item 38."""
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    consts = {
        "legacy.shape_rows_1_heads_dhead": [0, 1, n_heads, d_head],
        "legacy.shape_rows_1_1_1": [-1, 1, 1, 1],
        "legacy.shape_heads_1_dhead": [1, n_heads, 1, d_head],
    }
    graph.initializer.extend(numpy_helper.from_array(np.array(v, np.int64), k) for k, v in consts.items())
    columns = [
        helper.make_node("Reshape", ["positions", "legacy.shape_rows_1_1_1"], ["legacy.at"]),
        helper.make_node("Expand", ["legacy.at", "legacy.shape_heads_1_dhead"], ["legacy.columns"]),
    ]
    nodes, count = [], 0
    for node in graph.node:
        if node.op_type != "ScatterND":
            nodes.append(node)
            continue
        padded, _, by_head = node.input
        new = producer[by_head].input[0]  # the (rows, 1, d) key or value the Reshape to (rows, heads, d_head) read
        shaped, moved = f"legacy.shaped_{count}", f"legacy.by_head_{count}"
        nodes += [*(columns if count == 0 else [])]
        nodes += [
            helper.make_node("Reshape", [new, "legacy.shape_rows_1_heads_dhead"], [shaped]),
            helper.make_node("Transpose", [shaped], [moved], perm=[0, 2, 1, 3]),
            helper.make_node("ScatterElements", [padded, "legacy.columns", moved], list(node.output), axis=2),
        ]
        count += 1
    del graph.node[:]
    graph.node.extend(nodes)
    drop_unused(graph)
    onnx.save(model, str(path))
    return count


def _ops(path) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node)


def _files(bundle) -> dict[str, bytes]:
    return {str(p.relative_to(bundle)): p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def bundles(tiny_bundle_dir, tmp_path_factory):
    """(current, legacy): the tiny bundle with a shortlist (its live step graphs then hold an If over the
    vocabulary subset), and a copy of it whose live step graphs write the cache the legacy way, sealed again."""
    work = tmp_path_factory.mktemp("upgrade")
    current = work / "current" / "de-en" / "1"
    shutil.copytree(tiny_bundle_dir, current)
    corpus = write_corpus(work / "corpus")
    assert export_main(["shortlist", "--bundle", str(current), "--data", str(corpus), "--frequent", "8"]) == 0
    legacy = work / "legacy" / "de-en" / "1"
    shutil.copytree(current, legacy)
    manifest = json.loads((legacy / MANIFEST).read_text())
    heads = manifest["model"]["n_heads"]
    for variant in manifest["variants"].values():
        assert _legacy_writes(legacy / variant[LIVE_STEP], heads, manifest["model"]["d_model"] // heads) > 0
    manifest.pop("manifest_sha256")
    from export.manifest import seal

    seal(legacy, manifest)
    load_bundle(legacy)
    return current, legacy


def _flow(bundle, variant: str, beam: int) -> list[tuple]:
    """The sample sentences through one live decode (continuous batching's path), joining two at a time."""
    engine = Engine(load_bundle(bundle), variant, "cpu", intra_op_threads=1)
    options = engine.resolved(TranslateOptions(beam_size=beam, no_repeat_ngram_size=0))
    waiting, state, out = list(enumerate(engine.source_ids(SAMPLE_SENTENCES)))[::-1], LiveBatch(engine), {}
    while waiting or len(state):
        state.add([(i, s, options, False) for i, s in (waiting.pop() for _ in range(min(2, len(waiting))))])
        for key, result in state.step().finished:
            out[key] = (result.token_ids, result.score)
    return [out[k] for k in sorted(out)]


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_the_legacy_write_is_what_the_current_one_computes(bundles, variant):
    """The premise: both writers give the same caches and answers (the upgrade is then a pure speed change)."""
    current, legacy = bundles
    graph = f"graphs/{variant}.{LIVE_STEP}.onnx"
    assert _ops(legacy / graph)["ScatterElements"] > 0 and _ops(legacy / graph)["ScatterND"] == 0
    assert _flow(legacy, variant, 4) == _flow(current, variant, 4)


def test_upgrade_gives_the_current_exporters_graph_and_touches_nothing_else(bundles, tmp_path):
    current, legacy = bundles
    bundle = tmp_path / "de-en" / "1"
    shutil.copytree(legacy, bundle)
    before = _files(bundle)
    code = export_main(["upgrade", "--bundle", str(bundle)])
    assert code == 0
    manifest = load_bundle(bundle).manifest  # sealed again: every file's sha256 and the digest verify
    graphs = sorted(f"graphs/{v}.{LIVE_STEP}.onnx" for v in manifest["variants"])
    [entry] = manifest["upgrades"]
    assert entry["rewrite"] == "scatter_nd_cache_write" and sorted(entry["graphs"]) == graphs
    after = _files(bundle)
    assert sorted(k for k in after if after[k] != before.get(k)) == sorted([*graphs, MANIFEST])
    for graph in graphs:  # the same operators as the current exporter writes (the old index nodes gone)
        assert _ops(bundle / graph) == _ops(current / graph)
    assert export_main(["upgrade", "--bundle", str(bundle)]) == 0  # nothing left to do: nothing rewritten
    assert _files(bundle) == after
    assert upgrade_bundle(current) == {}  # a bundle of the current exporter is left as it is


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_an_upgraded_step_computes_the_legacy_steps_values_bit_for_bit(bundles, tmp_path, variant):
    _, legacy = bundles
    bundle = tmp_path / "de-en" / "1"
    shutil.copytree(legacy, bundle)
    upgrade_bundle(bundle)
    config = load_bundle(bundle).model_config
    graph = f"graphs/{variant}.{LIVE_STEP}.onnx"
    old, new = (ort.InferenceSession(str(b / graph), providers=["CPUExecutionProvider"]) for b in (legacy, bundle))
    for rows, past in ((1, 0), (3, 5), (8, 12)):
        feeds, fetch = step_feeds(new, config, rows, rows, 7, past, 1, np.random.default_rng(rows))
        positions = np.random.default_rng(past).integers(0, past + 1, rows)  # ragged: each row its own column
        feeds.update(ragged_inputs(positions, np.arange(rows), rows, past))
        for a, b in zip(old.run(fetch, feeds), new.run(fetch, feeds), strict=True):
            assert np.array_equal(a, b)
    assert _flow(bundle, variant, 1) == _flow(legacy, variant, 1)


def test_a_graph_not_written_by_the_exporter_is_refused(bundles, tmp_path):
    _, legacy = bundles
    bundle = tmp_path / "de-en" / "1"
    shutil.copytree(legacy, bundle)
    path = bundle / f"graphs/int8.{LIVE_STEP}.onnx"  # after fp32's, which would rewrite
    model = onnx.load(str(path), load_external_data=False)
    scatter = next(n for n in model.graph.node if n.op_type == "ScatterElements")
    scatter.input[0] = "past_keys_0"  # not the Pad of a cache
    onnx.save(model, str(path))
    before = _files(bundle)
    with pytest.raises(ValueError, match="not a cache write"):
        upgrade_bundle(bundle)
    assert _files(bundle) == before  # the other variants' graphs were not written either
