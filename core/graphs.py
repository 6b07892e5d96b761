"""The ONNX graph interface of a bundle: input and output names, metadata keys, the step-graph interface version.

The exporter (export/graphs.py, export/decoder_step.py) writes graphs with these names and the engine
(service/engine/) feeds and reads them; both import them from here.

encoder.onnx:      src_ids (batch, src) -> encoder_output, encoder_attention, cross_keys, cross_values
decoder.onnx:      tokens, src_mask, cross_keys, cross_values, past_keys, past_values (stacked per layer)
                   -> log_probs, present_keys, present_values, self_attention, cross_attention
                   or, for linear attention (a running state instead of a key/value cache, see below):
                   tokens, src_mask, cross_keys, cross_values, past_kv_sums, past_k_sums, past_length
                   -> log_probs, present_kv_sums, present_k_sums, self_attention, cross_attention
decoder_step.onnx: tokens, src_mask, top_k, [positions, self_mask, query_rows, row_slots (interface 3+)],
                   cross_keys_<i>, cross_values_<i>, past_keys_<i>, past_values_<i>
                   -> log_probs, top_log_probs, top_ids, present_keys_<i>, present_values_<i>
decoder_step_batch.onnx: the same inputs and outputs, interface 3, for whole-batch search (BATCH_STEP below)
decoder_loop.onnx: decoder_step_batch inside an ONNX Loop: one sentence's whole search (SEARCH_LOOP below)

Interfaces 3 and 4 let rows at different positions share a step (continuous batching, service/engine/live.py):
- ``positions`` (rows, 1) int64: each row's own position (its number of real cache entries);
- ``self_mask`` (rows, past_len + 1) bool: which cache columns (and the new one, always true) a row attends to.
  Interface 4: a row's real entries are the first ``positions[r]`` columns (right padding) and the step writes its
  new key/value at column ``positions[r]`` of the present; interface 3: they are the last ones (left padding) and
  the new key/value is appended after them (``right_padded``);
- ``query_rows`` (sources, group) int64: the rows whose queries read each source's cross keys/values (padded to
  the widest group by repeating a row of the same source); ``row_slots`` (rows,) int64: the flat slot
  (source * group + j) of each row in that layout. Sources may have different numbers of rows (greedy and beam
  sentences of any beam size share a step) and rows need not be ordered by source.
"""

from __future__ import annotations

from collections.abc import Mapping

ENCODER_INPUTS = ["src_ids"]
ENCODER_OUTPUTS = ["encoder_output", "encoder_attention", "cross_keys", "cross_values"]
DECODER_INPUTS = ["tokens", "src_mask", "cross_keys", "cross_values", "past_keys", "past_values"]
DECODER_OUTPUTS = ["log_probs", "present_keys", "present_values", "self_attention", "cross_attention"]

# decoder.onnx's self-attention cache, told apart by the graph's input names (graphs without the linear-state names,
# every one exported before them included, have the key/value cache):
# - kv: past_keys / past_values (layers, rows, heads, past_len, d_head), empty (past_len 0) at the start, one column
#   more per token;
# - linear_state (linear attention, model/linear_attention.py): past_kv_sums = sum_j phi(k_j) v_j^T (layers, rows,
#   heads, d_head, d_head) and past_k_sums = sum_j phi(k_j) (layers, rows, heads, 1, d_head), zeros at the start and
#   the same size at every step, and past_length (1,) int64, the number of tokens summed (the new token's position).
#   Its self_attention output covers the new tokens' keys only (the state keeps no keys).
# Both kinds keep rows on axis 1, so search reorders them the same way.
KV_CACHE, LINEAR_STATE = "kv", "linear_state"
LINEAR_STATE_INPUTS = ["tokens", "src_mask", "cross_keys", "cross_values", "past_kv_sums", "past_k_sums", "past_length"]
LINEAR_STATE_OUTPUTS = ["log_probs", "present_kv_sums", "present_k_sums", "self_attention", "cross_attention"]


def decoder_cache(input_names: list[str]) -> str:
    """The cache kind of a decoder.onnx graph from its input names."""
    return LINEAR_STATE if "past_kv_sums" in input_names else KV_CACHE


def decoder_inputs(cache: str) -> list[str]:
    return LINEAR_STATE_INPUTS if cache == LINEAR_STATE else DECODER_INPUTS


def decoder_outputs(cache: str) -> list[str]:
    return LINEAR_STATE_OUTPUTS if cache == LINEAR_STATE else DECODER_OUTPUTS


# decoder_step.onnx metadata: the interface version and the most candidates its two-stage top-k serves
STEP_INTERFACE_KEY = "mtserve.decoder_step"
MAX_TOP_K_KEY = "mtserve.max_top_k"
# 1: cross keys/values per row (graphs of version 1 carry no metadata entry)
# 2: cross keys/values per source, rows grouped by source; TopK runs only when top_k > 0
# 3: per-row positions and self-attention mask over a left-padded cache; rows find their source through
#    query_rows / row_slots (any number of rows per source)
# 4: the cache right padded: a row's real entries first, its new key/value written at its own column, so that a
#    row's attention reads its entries where it reads them alone, whatever the rows beside it (issue 36)
STEP_INTERFACE = 4
RAGGED_INPUTS = ["positions", "self_mask", "query_rows", "row_slots"]  # interface 3 and later


def right_padded(interface: int) -> bool:
    """Whether a decoder_step graph of this interface keeps each row's cache entries first (right padding)."""
    return interface >= 4


def step_interface(metadata: Mapping[str, str]) -> int:
    """The interface version of a decoder_step graph from its custom metadata (1 when the entry is absent)."""
    return int(metadata.get(STEP_INTERFACE_KEY, "1"))


def step_input_names(n_layers: int, interface: int = STEP_INTERFACE) -> list[str]:
    names = ["tokens", "src_mask", "top_k"] + (RAGGED_INPUTS if interface >= 3 else [])
    for i in range(n_layers):
        names += [f"cross_keys_{i}", f"cross_values_{i}"]
    for i in range(n_layers):
        names += [f"past_keys_{i}", f"past_values_{i}"]
    return names


def step_output_names(n_layers: int) -> list[str]:
    names = ["log_probs", "top_log_probs", "top_ids"]
    for i in range(n_layers):
        names += [f"present_keys_{i}", f"present_values_{i}"]
    return names


def step_present_names(n_layers: int) -> list[str]:
    """The cache outputs of a step, layer by layer: present_keys_0, present_values_0, present_keys_1, ..."""
    return [f"present_{kind}_{i}" for i in range(n_layers) for kind in ("keys", "values")]


# A bundle exported since the two-graph change carries two step graphs per variant, over the same weights:
# - LIVE_STEP ("decoder_step", interface 4): the batch-invariant graph the live decode (continuous batching) needs,
#   rows of different ages side by side, each computing bit for bit what it computes alone (issue 36);
# - BATCH_STEP ("decoder_step_batch", interface 3): whole-batch search (greedy, beam, n-best), every row at one
#   position over a full cache, where interface 3's appended cache is 1.4-1.7x cheaper per step from 4 rows up
#   (docs/engine-speed-log.md item 17) and no row joins late, so there is no invariance to keep.
# Older bundles have LIVE_STEP alone (interface 3 or 4); it then serves both (``step_graph_keys``).
LIVE_STEP, BATCH_STEP = "decoder_step", "decoder_step_batch"
BATCH_STEP_INTERFACE = 3
STEP_GRAPHS = (LIVE_STEP, BATCH_STEP)


def step_graph_keys(graphs: Mapping[str, object]) -> tuple[str, str] | None:
    """The (whole-batch search, live decode) step graphs of a bundle variant's entry (graph key -> file): the two
    graphs where the variant has both, else its one ``decoder_step`` for both; None when it has no step graph."""
    if LIVE_STEP not in graphs:
        return None
    return (BATCH_STEP if BATCH_STEP in graphs else LIVE_STEP), LIVE_STEP


# SEARCH_LOOP ("decoder_loop", issue 33 lever 3): the whole-batch step graph as the body of an ONNX Loop that runs
# the beam search of one sentence, k beams (k = 1: greedy), in one session call (export/search_loop.py). Inputs:
# max_steps () int64; tokens (k, 1) = BOS; past_keys_<i> / past_values_<i> (k, heads, 0, d_head) empty; scores
# (k, 1) float64, the start beams' scores (0, then -inf); src_mask, cross_keys_<i>, cross_values_<i> of one source;
# vocab_ids when the step graph takes it. Outputs per step (steps, k) each, in rank order: ``ended`` (EOS among the
# k best candidates), ``ended_beams``, ``ended_scores``, and the k continuing candidates' ``going_beams``,
# ``going_ids``, ``going_scores``: the back-pointers service/engine/search_loop.py rebuilds hypotheses from. Bundles
# carry it beside the step graphs (same weights file regions); older ones search in Python.
SEARCH_LOOP = "decoder_loop"
SEARCH_LOOP_OUTPUTS = ["ended", "ended_beams", "ended_scores", "going_beams", "going_ids", "going_scores"]
# The fused search graph (core/fused_step_graph.py ``fused_search_graph``) searches a batch of sources in one call:
# besides the loop graph's inputs (tokens, scores and past of sources * k rows, src_mask and cross keys/values of
# the sources) it takes ``source_limits`` (sources,) int64, each source's max_steps, and besides its outputs (steps,
# sources * k) it gives ``source_steps`` (sources,) int64: how many of those rows are each source's own. It also
# takes ``no_repeat_ngram_size`` () int64 and applies that block itself (0: none; service/engine/no_repeat.py).
SOURCE_LIMITS = "source_limits"
SOURCE_STEPS = "source_steps"
NO_REPEAT_NGRAM = "no_repeat_ngram_size"


# A step graph rewritten for the lexical shortlist (export/vocab_subset.py, issue 33) takes one more input,
# ``vocab_ids`` (subset,) int64 ascending: empty = the whole vocabulary, exactly as before; else ``log_probs`` is
# (rows, subset) over those ids (column j = id vocab_ids[j]) and ``top_ids`` are vocabulary ids. Orthogonal to the
# interface version (both step graphs of a bundle get it); the metadata entry marks it, the input name is what the
# engine checks.
VOCAB_IDS = "vocab_ids"
VOCAB_SUBSET_KEY = "mtserve.vocab_subset"
# The fused step and search (core/fused_step_graph.py) take one more, optional: ``vocab_sources`` (sources, subset)
# bool, the subset's ids each source owns (its own shortlist within the batch's union); a source's rows then
# normalize over those ids only, so that its log-probabilities are the ones it gets alone, whatever companions widen
# the union (issue 56). An overridable initializer, empty by default: every row over the whole subset.
VOCAB_SOURCES = "vocab_sources"

# A step graph rewritten into one fused operator node (core/fused_step_graph.py) carries this metadata entry ("1"):
# its top-k is a scan over each row's log-probabilities, as cheap as an arg-max at any k, so the engine ranks there
# for greedy search too instead of fetching log_probs for numpy.
FUSED_STEP_KEY = "mtserve.fused_step"


def has_vocab_ids(session) -> bool:
    """Whether an onnxruntime session's step graph takes ``vocab_ids`` (an empty one = the whole vocabulary)."""
    return any(i.name == VOCAB_IDS for i in session.get_inputs())


def has_vocab_sources(session) -> bool:
    """Whether an onnxruntime session (a fused step or search) takes ``vocab_sources``."""
    return any(i.name == VOCAB_SOURCES for i in session.get_overridable_initializers())
