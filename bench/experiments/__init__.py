"""Finished A/B experiments on the engine's internals, kept runnable so that the figures of docs/engine-speed-log.md
(items 11, 14, 16, 41 and 43) can be measured again: ``python -m bench.experiments.<name>``.

- ``attention_cache``: one self-attention call, MultiHeadAttention against GroupQueryAttention on shared buffers;
- ``inplace_cache``: whole translations with the key/value cache written in place (slower end to end);
- ``cache_gather``: the ways of copying the cache rows a step keeps;
- ``lean_encoder``: the traced encoder graph against one built node by node with the fused attention kernel;
- ``fused_step``: the decoder step as one C call (``fused_step.c``, built with the system's C compiler), timed
  beside the engine's search and CTranslate2: what a fused kernel per step would buy;

They are not the benchmarks people run (bench/engine.py, bench/serving.py ...); ``inplace_cache`` subclasses the
engine's private decoder state, which it measures an alternative to.
"""
