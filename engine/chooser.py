"""Which search runs a request's sentences, decided once, here (as Hugging Face's generate picks its decoding
mode from the generation config, or CTranslate2's translator from its options):

- the live decode (continuous batching, engine/live.py) or whole batches: ``decodes_live``, asked by the worker
  for each waiting sentence;
- within a whole batch: ``choose``: constrained greedy (one row a sentence, engine/constrained_greedy.py) or
  constrained beam (engine/constrained.py) for sentences with glossary terms or protected spans; the search with
  the cache on the device (engine/device_state.py); the bundle's search loop graph (one session call: a lone
  sentence's greedy or beam search, or a whole batch in the fused search operator, engine/search_loop.py); else
  the step-by-step greedy or beam search in Python (engine/search.py), on the fused step or the step graph
  (whichever ``Engine.step_decoder`` holds).

The options are resolved (engine/decoding.py) before anything here reads them.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import numpy as np

from engine.decoding import TranslateOptions

# engine/engine.py's Engine, which imports this module: named, not imported
Engine = Any


class Search(Enum):
    CONSTRAINED_GREEDY = "constrained greedy"
    CONSTRAINED_BEAM = "constrained beam"
    DEVICE = "device"  # encoder outputs and cache on the device (I/O binding)
    LOOP = "loop"  # the search loop graph: a lone sentence, or a whole batch in the fused search
    STEPS = "steps"  # step by step in Python, one step session call a step


def decodes_live(options: Any, streaming: bool = False) -> bool:
    """Whether a waiting sentence decodes live. Translations do; embeddings, attention and constrained translations
    (glossaries, do-not-translate spans: engine/constrained.py) run as whole batches. With the repeated-n-gram block
    (engine/no_repeat.py) only a streaming request decodes live (its tokens come as they are final): on the
    general-domain model the live decode costs more than whole batches, whose lone sentences search in one
    onnxruntime call (docs/engine-speed-log.md item 28: 0.66x dynamic batching's throughput at 64 clients live
    against 1.10x in whole batches, first streamed token 101 against 194 ms p50)."""
    if not isinstance(options, TranslateOptions) or options.constrained:
        return False
    return streaming or not options.no_repeat_ngram_size


def choose(
    engine: Engine, options: TranslateOptions, sources: int, vocab_ids: np.ndarray | None, constrained: bool = False
) -> Search:
    """The search of a whole batch of ``sources`` sentences (all constrained, or none) with resolved ``options``;
    ``vocab_ids``: the batch's vocabulary subset (``Engine.vocab_subset``; None: the whole vocabulary)."""
    if constrained:
        greedy = options.beam_size == 1 and options.num_hypotheses == 1 and engine.greedy_terms == "row"
        return Search.CONSTRAINED_GREEDY if greedy else Search.CONSTRAINED_BEAM
    if engine.device_runner is not None and not options.no_repeat_ngram_size:
        return Search.DEVICE
    loop = engine.search_loop if engine.step_decoder is not None else None
    if loop is not None and (sources == 1 or loop.batched) and loop.serves(options.beam_size, vocab_ids):
        return Search.LOOP
    return Search.STEPS
