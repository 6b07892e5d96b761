"""Beam search of one sentence as one graph: a bundle's whole-batch step graph inside an ONNX ``Loop``.

Issue 33, lever 3 ("the search loop out of Python"). ``loop_model`` makes the step graph (interface 3 or 4, with or
without ``vocab_ids``) the body of a standard ``Loop`` over the k rows (beams) of one sentence, k taken from the
rows of the ``tokens`` input. Each iteration does what engine/search.py's ``_beam_one`` does around a step:

- the step inputs of k rows of one source at step t (position t, t + 1 columns attended, the source's query group
  of max(k, MIN_GROUP) slots: engine/step_inputs.py ``uniform_inputs``) and ``top_k`` = 2k;
- the k x 2k candidates' totals, float32 log-probabilities added to the beams' float64 scores in float64, ranked by
  TopK (largest first; among equal totals the lower flat index, which is the lower beam, then the beam's own
  order, lower id first among equal log-probabilities: ``rank_one``'s order (score, beam, token));
- EOS among the k best ends a hypothesis; the k best other candidates go on: the next tokens, scores, and the
  key/value cache rows of their beams (Gather);
- the loop stops once k hypotheses have ended, or after ``max_steps``.

Per iteration the loop emits (scan outputs, (steps, k) each) the ranked first k candidates' EOS flags, beams and
scores, and the continuing candidates' beams, tokens and scores; engine/search_loop.py rebuilds the
hypotheses from these back-pointers exactly as ``_beam_one`` builds them. Greedy search is the case k = 1: the
best candidate ends the sentence when it is EOS, else it goes on (the same tokens and float64 sums as the greedy
search: the step's TopK keeps the lower id among ties, as numpy's argmax).

Over a shortlist step graph (export/vocab_subset.py) the subset's projection rows, scales and bias depend only on
``vocab_ids`` and weights: ``_hoist_subset`` gathers them once per sentence in the outer graph instead of at every
step (the step-by-step search gathers them every step; docs/engine-speed-log.md item 23 found that gather eats
what int8 saves).

The step graph's nodes and initializers move into the body unchanged: initializers that are external data keep
their references (file, offset, length), so the loop graph reads the same regions of the same weights file and a
bundle grows by one small graph proto per variant. (Initializers in the outer graph, read by the body through
outer scope, measured 8-10% slower per sentence: onnxruntime did not prepack them for the body's kernels.)
``add_search_loops`` writes ``<step graph's folder>/<variant>.decoder_loop.onnx`` for each variant whose
whole-batch step graph has interface 3 or later, keeps its weights outside the graph (format 2) and computes in
float32 or int8 (``_half``), and names it in the variant's entry; the caller seals the manifest.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto, helper

from core.graphs import SEARCH_LOOP, SEARCH_LOOP_OUTPUTS, VOCAB_IDS, step_graph_keys, step_interface
from core.tokenizer import EOS_ID
from engine.step_inputs import MIN_GROUP

log = logging.getLogger(__name__)
I64, F64, BOOL = TensorProto.INT64, TensorProto.DOUBLE, TensorProto.BOOL


def _node(op: str, inputs: list[str], outputs: list[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, name=f"{op}_{outputs[0]}", **attrs)


def _typed(name: str, like: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, like.type.tensor_type.elem_type, None)


def _carried(graph: onnx.GraphProto) -> list[str]:
    n_layers = sum(1 for i in graph.input if i.name.startswith("past_keys_"))
    return ["tokens"] + [f"past_{kind}_{i}" for i in range(n_layers) for kind in ("keys", "values")]


def _outer_nodes() -> list[onnx.NodeProto]:
    """k, 2k and the query layout of k rows of one source, computed once from the ``tokens`` input."""
    return [
        _node("Shape", ["tokens"], ["s.rows_1"], start=0, end=1),
        _node("Reshape", ["s.rows_1", "s.shape_scalar"], ["s.k"]),
        _node("Mul", ["s.k", "s.two"], ["s.two_k"]),
        _node("Reshape", ["s.two_k", "s.shape_1"], ["top_k"]),
        _node("Range", ["s.zero", "s.k", "s.one"], ["row_slots"]),
        _node("Max", ["s.k", "s.min_group"], ["s.group"]),
        _node("Sub", ["s.group", "s.k"], ["s.padding"]),
        _node("Reshape", ["s.padding", "s.shape_1"], ["s.padding_1"]),
        _node("Concat", ["s.zero_1", "s.padding_1"], ["s.pads"], axis=0),
        # padding slots repeat the source's last row (uniform_inputs)
        _node("Pad", ["row_slots", "s.pads"], ["s.slots"], mode="edge"),
        _node("Unsqueeze", ["s.slots", "s.axis_0"], ["query_rows"]),
        _node("Reshape", ["s.k", "s.shape_1"], ["s.k_1"]),
        _node("Concat", ["s.two_1", "s.k_1"], ["s.going_ends"], axis=0),
    ]


def _outer_constants() -> list[onnx.TensorProto]:
    return [
        helper.make_tensor("s.true", BOOL, [], [True]),
        helper.make_tensor("s.shape_scalar", I64, [0], []),
        helper.make_tensor("s.shape_1", I64, [1], [1]),
        helper.make_tensor("s.zero", I64, [], [0]),
        helper.make_tensor("s.one", I64, [], [1]),
        helper.make_tensor("s.two", I64, [], [2]),
        helper.make_tensor("s.min_group", I64, [], [MIN_GROUP]),
        helper.make_tensor("s.zero_1", I64, [1], [0]),
        helper.make_tensor("s.one_1", I64, [1], [1]),
        helper.make_tensor("s.two_1", I64, [1], [2]),
        helper.make_tensor("s.axis_0", I64, [1], [0]),
        helper.make_tensor("s.finished_0", I64, [], [0]),
    ]


def _body_nodes(step: onnx.GraphProto, presents: list[str]) -> list[onnx.NodeProto]:
    inputs = [
        # k rows at step t: position t, the t cached columns and the new one attended
        _node("Reshape", ["s.t", "s.shape_1_1"], ["s.t_1_1"]),
        _node("Concat", ["s.k_1", "s.one_1"], ["s.position_shape"], axis=0),
        _node("Expand", ["s.t_1_1", "s.position_shape"], ["positions"]),
        _node("Add", ["s.t", "s.one"], ["s.width"]),
        _node("Reshape", ["s.width", "s.shape_1"], ["s.width_1"]),
        _node("Concat", ["s.k_1", "s.width_1"], ["s.mask_shape"], axis=0),
        _node("ConstantOfShape", ["s.mask_shape"], ["self_mask"], value=helper.make_tensor("v", BOOL, [1], [True])),
    ]
    rank = [
        # the k x 2k candidates' totals in float64, ranked: (score, beam, token) as rank_one
        _node("Cast", ["top_log_probs"], ["s.log_probs_64"], to=F64),
        _node("Add", ["s.log_probs_64", "s.scores"], ["s.totals"]),
        _node("Reshape", ["s.totals", "s.flat_shape_2"], ["s.flat_totals"]),
        _node("Reshape", ["top_ids", "s.flat_shape_2"], ["s.flat_ids"]),
        _node("TopK", ["s.flat_totals", "top_k"], ["s.cand_scores", "s.cand_at"], axis=1, largest=1, sorted=1),
        _node("GatherElements", ["s.flat_ids", "s.cand_at"], ["s.cand_ids"], axis=1),
        _node("Div", ["s.cand_at", "s.two_k"], ["s.cand_beams"]),
        _node("Equal", ["s.cand_ids", "s.eos"], ["s.cand_eos"]),
        # the first k candidates: EOS among them ends a hypothesis
        _node("Slice", ["s.cand_eos", "s.zero_1", "s.k_1", "s.one_1"], ["s.first_eos"]),
        _node("Slice", ["s.cand_beams", "s.zero_1", "s.k_1", "s.one_1"], ["s.first_beams"]),
        _node("Slice", ["s.cand_scores", "s.zero_1", "s.k_1", "s.one_1"], ["s.first_scores"]),
        _node("Reshape", ["s.first_eos", "s.shape_minus_1"], ["s.ended"]),
        _node("Reshape", ["s.first_beams", "s.shape_minus_1"], ["s.ended_beams"]),
        _node("Reshape", ["s.first_scores", "s.shape_minus_1"], ["s.ended_scores"]),
        _node("Cast", ["s.ended"], ["s.ended_count"], to=I64),
        _node("ReduceSum", ["s.ended_count"], ["s.ended_sum"], keepdims=0),
        _node("Add", ["s.finished", "s.ended_sum"], ["s.finished_out"]),
        _node("Less", ["s.finished_out", "s.k"], ["s.go_on"]),
        # the k best other candidates go on (at most k of the 2k are EOS: one per beam)
        _node("Not", ["s.cand_eos"], ["s.cand_going"]),
        _node("NonZero", ["s.cand_going"], ["s.going_2d"]),
        _node("Slice", ["s.going_2d", "s.going_starts", "s.going_ends", "s.going_axes"], ["s.going_at_1"]),
        _node("Reshape", ["s.going_at_1", "s.shape_minus_1"], ["s.going_at"]),
        _node("Reshape", ["s.cand_beams", "s.shape_minus_1"], ["s.cand_beams_1"]),
        _node("Reshape", ["s.cand_ids", "s.shape_minus_1"], ["s.cand_ids_1"]),
        _node("Reshape", ["s.cand_scores", "s.shape_minus_1"], ["s.cand_scores_1"]),
        _node("Gather", ["s.cand_beams_1", "s.going_at"], ["s.going_beams"]),
        _node("Gather", ["s.cand_ids_1", "s.going_at"], ["s.going_ids"]),
        _node("Gather", ["s.cand_scores_1", "s.going_at"], ["s.going_scores"]),
        _node("Reshape", ["s.going_ids", "s.shape_minus_1_1"], ["s.next_tokens"]),
        _node("Reshape", ["s.going_scores", "s.shape_minus_1_1"], ["s.next_scores"]),
    ]
    reorder = [_node("Gather", [p, "s.going_beams"], [f"s.next_{p}"], axis=0) for p in presents]
    return [*inputs, *step.node, *rank, *reorder]


def _body_constants() -> list[onnx.TensorProto]:
    return [
        helper.make_tensor("s.shape_1_1", I64, [2], [1, 1]),
        helper.make_tensor("s.shape_minus_1", I64, [1], [-1]),
        helper.make_tensor("s.shape_minus_1_1", I64, [2], [-1, 1]),
        helper.make_tensor("s.flat_shape_2", I64, [2], [1, -1]),
        helper.make_tensor("s.eos", I64, [], [EOS_ID]),
        # NonZero of a (1, 2k) mask is (2, n): its second row, first k entries
        helper.make_tensor("s.going_starts", I64, [2], [1, 0]),
        helper.make_tensor("s.going_axes", I64, [2], [0, 1]),
    ]


def _hoist_subset(graph: onnx.GraphProto) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Take the loop-invariant part of a shortlist step graph's subset branch (export/vocab_subset.py: the Gathers
    of the subset's projection rows, scales and bias, and the int8 rows' Transpose, which read only ``vocab_ids``
    and weights) out of ``graph`` (edited in place), to run once per sentence in the outer graph instead of at
    every step. Returns those nodes, reading copies of the weights and weight-only nodes they need (renamed
    ``hoist.*``: a Loop body may not redefine an outer name; the copies keep their external-data references, so
    onnxruntime loads that weight twice, once for the whole-vocabulary branch's prepacked product). A Gather of an
    empty ``vocab_ids`` (the whole vocabulary) is empty and cheap. Nothing to hoist: ([], [])."""
    branch_node = next((n for n in graph.node if n.op_type == "If" and n.input[0] == "vocab_ids.empty"), None)
    if branch_node is None:
        return [], []
    subset = next(a.g for a in branch_node.attribute if a.name == "else_branch")
    initializers = {t.name: t for t in graph.initializer}
    producers = {out: n for n in graph.node for out in n.output}

    def weight_only(name: str, seen: set[str]) -> bool:  # an initializer, or a node of initializers only
        if name in initializers or name in seen:
            return True
        node = producers.get(name)
        if node is None or node.op_type in ("If", "Loop", "Scan"):
            return False
        if all(weight_only(i, seen) for i in node.input if i):
            seen.add(name)
            return True
        return False

    constant: set[str] = set()
    invariant = {VOCAB_IDS}
    hoisted = []
    for node in subset.node:
        reads = [i for i in node.input if i]
        if not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute) and all(
            i in invariant or weight_only(i, constant) for i in reads
        ):
            hoisted.append(node)
            invariant.update(node.output)
    if not hoisted:
        return [], []
    kept = [n for n in subset.node if all(n is not h for h in hoisted)]
    del subset.node[:]
    subset.node.extend(kept)
    # the weights and weight-only nodes the hoisted nodes read, copied under new names
    needed: list[str] = []

    def need(name: str) -> None:
        if name in needed or name in invariant:
            return
        node = producers.get(name)
        if node is not None:
            for i in node.input:
                if i:
                    need(i)
        needed.append(name)

    for node in hoisted:
        for i in node.input:
            if i and i not in invariant:
                need(i)
    renamed = {name: f"hoist.{name}" for name in needed}
    copies = []
    for name in needed:
        if name in initializers:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(initializers[name])
            tensor.name = renamed[name]
            copies.append(tensor)
    outer_nodes = []
    done: set[int] = set()
    for name in needed:
        node = producers.get(name)
        if node is None or id(node) in done:
            continue
        done.add(id(node))
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = f"hoist.{node.name}"
        copy.input[:] = [renamed.get(i, i) for i in node.input]
        copy.output[:] = [renamed.get(o, o) for o in node.output]
        outer_nodes.append(copy)
    for node in hoisted:
        node.input[:] = [renamed.get(i, i) for i in node.input]
    return [*outer_nodes, *hoisted], copies


def loop_model(step: onnx.ModelProto) -> onnx.ModelProto:
    """The search loop of one sentence over ``step`` (a decoder step graph of interface 3 or later); ``step`` is
    left as it was (its nodes and initializers are copied)."""
    metadata = {p.key: p.value for p in step.metadata_props}
    if step_interface(metadata) < 3:
        raise ValueError("a search loop needs a step graph of interface 3 or later (positions, self_mask inputs)")
    graph = onnx.GraphProto()
    graph.CopyFrom(step.graph)
    hoisted, hoisted_weights = _hoist_subset(graph)
    inputs = {i.name: i for i in graph.input}
    outputs = {o.name: o for o in graph.output}
    carried = _carried(graph)
    presents = [name.replace("past_", "present_", 1) for name in carried[1:]]
    body_nodes = _body_nodes(graph, presents)
    body = helper.make_graph(
        body_nodes,
        "search_step",
        [
            helper.make_tensor_value_info("s.t", I64, []),
            helper.make_tensor_value_info("s.cond", BOOL, []),
            *[inputs[name] for name in carried],
            helper.make_tensor_value_info("s.scores", F64, ["rows", 1]),
            helper.make_tensor_value_info("s.finished", I64, []),
        ],
        [
            helper.make_tensor_value_info("s.go_on", BOOL, []),
            helper.make_tensor_value_info("s.next_tokens", I64, ["rows", 1]),
            *[_typed(f"s.next_{p}", outputs[p]) for p in presents],
            helper.make_tensor_value_info("s.next_scores", F64, ["rows", 1]),
            helper.make_tensor_value_info("s.finished_out", I64, []),
            helper.make_tensor_value_info("s.ended", BOOL, ["rows"]),
            helper.make_tensor_value_info("s.ended_beams", I64, ["rows"]),
            helper.make_tensor_value_info("s.ended_scores", F64, ["rows"]),
            helper.make_tensor_value_info("s.going_beams", I64, ["rows"]),
            helper.make_tensor_value_info("s.going_ids", I64, ["rows"]),
            helper.make_tensor_value_info("s.going_scores", F64, ["rows"]),
        ],
        initializer=[*graph.initializer, *_body_constants()],
    )
    body.value_info.extend(graph.value_info)
    fed = [n for n in inputs if n.startswith("cross_") or n in ("src_mask", VOCAB_IDS)]
    loop = helper.make_node(
        "Loop",
        ["max_steps", "s.true", *carried, "scores", "s.finished_0"],
        [
            "s.last_tokens",
            *[f"s.final_{p}" for p in presents],
            "s.final_scores",
            "s.final_finished",
            *SEARCH_LOOP_OUTPUTS,
        ],
        name="Loop_search",
        body=body,
    )
    scan = [
        helper.make_tensor_value_info(SEARCH_LOOP_OUTPUTS[0], BOOL, ["steps", "rows"]),
        helper.make_tensor_value_info(SEARCH_LOOP_OUTPUTS[1], I64, ["steps", "rows"]),
        helper.make_tensor_value_info(SEARCH_LOOP_OUTPUTS[2], F64, ["steps", "rows"]),
        helper.make_tensor_value_info(SEARCH_LOOP_OUTPUTS[3], I64, ["steps", "rows"]),
        helper.make_tensor_value_info(SEARCH_LOOP_OUTPUTS[4], I64, ["steps", "rows"]),
        helper.make_tensor_value_info(SEARCH_LOOP_OUTPUTS[5], F64, ["steps", "rows"]),
    ]
    outer = helper.make_graph(
        [*_outer_nodes(), *hoisted, loop],
        "search_loop",
        [
            helper.make_tensor_value_info("max_steps", I64, []),
            *[inputs[n] for n in carried],
            helper.make_tensor_value_info("scores", F64, ["rows", 1]),
            *[inputs[n] for n in fed],
        ],
        scan,
        initializer=[*_outer_constants(), *hoisted_weights],
    )
    model = helper.make_model(outer, opset_imports=list(step.opset_import), producer_name="mtserve search loop")
    model.ir_version = step.ir_version
    helper.set_model_props(model, {**metadata, "mtserve.search_loop": "1"})
    return model


def _external(model: onnx.ModelProto) -> bool:
    """Whether the graph's large weights are external data (a packed bundle), so a copy of its initializers is small."""
    return any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)


def _half(model: onnx.ModelProto) -> bool:
    """Whether the graph computes in float16. onnxruntime's CPU provider runs such graphs through Casts it inserts
    around the ops it has no float16 kernel for, and places them otherwise inside a Loop body: the tiny fp16
    bundle's loop chose the same tokens with scores 7e-5 apart (tests/export/test_bundle_layout.py), where the loop
    promises the same bits. fp16 variants (meant for GPUs, where the search runs on the device) get no loop."""
    return any(t.data_type == TensorProto.FLOAT16 for t in model.graph.initializer)


def add_search_loops(bundle_dir: Path, variants: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Write each eligible variant's search loop graph next to its whole-batch step graph and name it in the
    variant's entry (module docstring); returns ``variants``. Graphs are loaded without their weights."""
    for variant, entry in variants.items():
        keys = step_graph_keys(entry)
        if keys is None:
            continue
        step_file = bundle_dir / entry[keys[0]]
        step = onnx.load(str(step_file), load_external_data=False)
        interface = step_interface({p.key: p.value for p in step.metadata_props})
        if interface < 3 or not _external(step) or _half(step):
            log.info("%s: no search loop (step interface %d, weights inside the graph, or float16)", variant, interface)
            continue
        name = step_file.name.replace(keys[0], SEARCH_LOOP)
        if name == step_file.name:
            name = f"{variant}.{SEARCH_LOOP}.onnx"
        onnx.save(loop_model(step), str(step_file.parent / name))
        entry[SEARCH_LOOP] = str(Path(entry[keys[0]]).parent / name)
    return variants
