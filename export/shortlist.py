"""Learn a bundle's lexical shortlist from parallel text and ship it in the bundle (issue 33; core/shortlist.py).

The table: a few EM iterations of IBM Model 1 (Brown et al., 1993) over the subword ids of the parallel data,
tokenized with the bundle's own tokenizer (sources normalized as the engine normalizes them). For each source
subword s, its translations are the target subwords t with the highest p(t | s), at most ``top_n`` and each at
least ``min_prob``; a NULL source word absorbs target subwords that translate nothing (articles, punctuation),
which the ``frequent`` list (the ``frequent`` most common target subwords) covers instead.

``add_shortlist`` writes ``shortlist.npz``, rewrites each variant's step graphs to take ``vocab_ids``
(export/vocab_subset.py; the weights files stay as they are) and seals the manifest again, the table listed and
hashed like every other file, so a changed table is refused at load (core/bundle.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from core.bundle import MANIFEST
from core.graphs import SEARCH_LOOP, STEP_GRAPHS
from core.shortlist import SHORTLIST_FILE, Shortlist
from export.manifest import seal
from export.onnx_export import graph_signature
from export.search_loop import add_search_loops
from export.vocab_subset import add_vocab_subset, takes_vocab_ids

log = logging.getLogger(__name__)

DEFAULTS = {"top_n": 50, "min_prob": 0.001, "frequent": 1000, "iterations": 5}
MAX_PAIR_LENGTH = 80  # subwords per side: longer pairs are left out of the table (IBM 1's cost grows with |s| x |t|)


def ibm1(
    sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], vocab_size: int, iterations: int = 5
) -> tuple[np.ndarray, np.ndarray]:
    """IBM Model 1 translation probabilities p(t | s) of the co-occurring (s, t) pairs: (keys, probs), key = s *
    vocab_size + t, s = vocab_size the NULL word. Vectorized: every (sentence, target position, source position)
    triple is one entry of flat arrays, so an EM iteration is a few gathers and bincounts."""
    null = vocab_size
    key_parts, row_parts = [], []
    n_rows = 0  # a row: one target position of one sentence pair
    for src, tgt in zip(sources, targets, strict=True):
        if not src or not tgt or len(src) > MAX_PAIR_LENGTH or len(tgt) > MAX_PAIR_LENGTH:
            continue
        s = np.asarray([*src, null], dtype=np.int64)
        t = np.asarray(tgt, dtype=np.int64)
        key_parts.append((s[None, :] * vocab_size + t[:, None]).ravel())  # (target position, source position)
        row_parts.append(np.repeat(np.arange(n_rows, n_rows + len(t)), len(s)))
        n_rows += len(t)
    if not key_parts:
        raise ValueError("no sentence pair to learn a shortlist from")
    keys, pair = np.unique(np.concatenate(key_parts), return_inverse=True)  # pair: entry -> index into keys
    rows = np.concatenate(row_parts)
    source_of = keys // vocab_size
    prob = np.ones(len(keys))  # uniform start: every co-occurring pair as likely
    for _ in range(iterations):
        p = prob[pair]
        posterior = p / np.bincount(rows, weights=p, minlength=n_rows)[rows]  # over the row's source positions
        counts = np.bincount(pair, weights=posterior, minlength=len(keys))
        prob = counts / np.bincount(source_of, weights=counts, minlength=vocab_size + 1)[source_of]
    return keys, prob


def learn_shortlist(
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    vocab_size: int,
    top_n: int = DEFAULTS["top_n"],
    min_prob: float = DEFAULTS["min_prob"],
    frequent: int = DEFAULTS["frequent"],
    iterations: int = DEFAULTS["iterations"],
) -> Shortlist:
    """The shortlist of subword-id parallel data (module docstring)."""
    keys, prob = ibm1(sources, targets, vocab_size, iterations)
    s, t = keys // vocab_size, keys % vocab_size
    keep = (s < vocab_size) & (prob >= min_prob)
    s, t, prob = s[keep], t[keep], prob[keep]
    order = np.lexsort((t, -prob, s))  # by source, then best first (ties: lower id)
    s, t = s[order], t[order]
    starts = np.searchsorted(s, np.arange(vocab_size))
    rank = np.arange(len(s)) - starts[s]
    s, t = s[rank < top_n], t[rank < top_n]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(s, minlength=vocab_size))]).astype(np.int64)
    counts = np.bincount(np.fromiter((x for seq in targets for x in seq), dtype=np.int64), minlength=vocab_size)
    most = np.lexsort((np.arange(vocab_size), -counts))[:frequent]
    return Shortlist(most[counts[most] > 0], offsets, t)


def learn_for_bundle(
    bundle_dir: Path, data: Path, prefix: str, limit: int = 0, **options: Any
) -> tuple[Shortlist, dict[str, Any]]:
    """The shortlist of the bundle's tokenizer over ``data/<prefix>.<source>`` / ``.<target>`` (the first ``limit``
    pairs; 0 = all) and what to record of how it was made."""
    from core.normalize import source_normalizer
    from core.tokenizer import Tokenizer
    from model.data import read_parallel

    manifest = json.loads((bundle_dir / MANIFEST).read_text(encoding="utf-8"))
    source_lang, target_lang = manifest["source_language"], manifest["target_language"]
    sources, targets = read_parallel(data, prefix, source_lang, target_lang)
    if limit:
        sources, targets = sources[:limit], targets[:limit]
    tokenizer = Tokenizer(bundle_dir / manifest["tokenizer"]["file"])
    normalize = source_normalizer(manifest.get("source_normalization"), source_lang)
    src_ids = tokenizer.encode_batch([normalize(s) for s in sources])
    tgt_ids = tokenizer.encode_batch(targets)
    shortlist = learn_shortlist(src_ids, tgt_ids, tokenizer.vocab_size, **options)
    info = {
        "method": "ibm1",
        **options,
        "data": f"{Path(data).name}/{prefix}.{source_lang}-{target_lang}",
        "sentences": len(sources),
        "frequent_ids": len(shortlist.frequent),
        "table_entries": len(shortlist.targets),
    }
    return shortlist, info


def add_shortlist(bundle_dir: Path, shortlist: Shortlist, info: dict[str, Any]) -> dict[str, Any]:
    """Write the table into the bundle, give its step graphs the ``vocab_ids`` input, seal the manifest again;
    returns the manifest. Graphs already rewritten (a table replaced) are left as they are."""
    manifest = json.loads((bundle_dir / MANIFEST).read_text(encoding="utf-8"))
    if shortlist.vocab_size != manifest["model"]["vocab_size"]:
        raise ValueError(f"the shortlist has {shortlist.vocab_size} ids, the model {manifest['model']['vocab_size']}")
    shortlist.save(bundle_dir / SHORTLIST_FILE)
    rewritten = []
    for variant in manifest["variants"].values():
        for key in STEP_GRAPHS:
            if key not in variant:
                continue
            path = bundle_dir / variant[key]
            model = onnx.load(str(path), load_external_data=False)  # weights files stay untouched
            if takes_vocab_ids(model):
                continue
            onnx.save(add_vocab_subset(model), str(path))
            rewritten.append(variant[key])
    # a search loop graph wraps the whole-batch step graph: written again over the rewritten one
    looped = {name: v for name, v in manifest["variants"].items() if SEARCH_LOOP in v}
    add_search_loops(bundle_dir, looped)
    fp32 = manifest["variants"].get("fp32", {})
    for key in (*STEP_GRAPHS, SEARCH_LOOP):
        if key in fp32 and key in manifest.get("graphs", {}):
            manifest["graphs"][key] = graph_signature(bundle_dir / fp32[key])
    manifest["shortlist"] = {"file": SHORTLIST_FILE, **info}
    files = list(manifest["files"])
    if SHORTLIST_FILE not in files:
        files.append(SHORTLIST_FILE)
    manifest["files"] = files
    manifest.pop("manifest_sha256", None)
    seal(bundle_dir, manifest)
    log.info("shortlist written to %s; step graphs rewritten: %s", bundle_dir, rewritten or "none")
    return manifest
