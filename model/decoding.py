"""Reference decoding in PyTorch: batched greedy and beam search over the key/value cache.

The onnxruntime engine (``engine/search.py``) implements the same algorithm in numpy and
must give the same hypotheses. Conventions shared by both:
- log-probabilities are computed in float32 and summed in float64; a hypothesis score is the sum
  of the log-probabilities of its generated tokens, EOS included when generated;
- each sentence has its own length limit: ``max_length`` if given, else 2 * (its source length,
  EOS included) + 10, capped at max_positions - 1, so a sentence decodes the same alone or in a batch;
- beam hypotheses are ranked by score / lp, lp = ((5 + length) / 6) ** length_penalty (Wu et al.
  2016), length counting EOS; length_penalty 0 ranks by raw score;
- each step takes the top 2 * beam candidates; EOS candidates among the first ``beam`` end a
  hypothesis, the others fill the next beam; a sentence is done once ``beam`` hypotheses ended;
  at its length limit its live hypotheses end as they are.
"""

from __future__ import annotations

import torch
from torch import Tensor

from core.search import DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY, Hypothesis, length_limits
from model.transformer import Transformer


def _limits(model: Transformer, src: Tensor, max_length: int | None) -> list[int]:
    lengths = (src != model.cfg.pad_id).sum(dim=1).tolist()
    return length_limits(lengths, model.cfg.max_positions, max_length)


def _step_log_probs(model: Transformer, logits: Tensor) -> Tensor:
    return model.log_probs(logits[:, -1]).double()  # (rows, vocab)


@torch.no_grad()
def greedy_search(model: Transformer, src: Tensor, max_length: int | None = None) -> list[Hypothesis]:
    cfg = model.cfg
    limits = torch.tensor(_limits(model, src, max_length))
    enc = model.encode(src)
    kv = model.cross_kv(enc.memory)
    batch = src.size(0)
    last = torch.full((batch, 1), cfg.bos_id, dtype=torch.long)
    finished = torch.zeros(batch, dtype=torch.bool)
    scores = torch.zeros(batch, dtype=torch.float64)
    generated: list[Tensor] = []
    cache = None
    for step in range(int(limits.max())):
        out = model.decode(last, kv, enc.src_mask, cache, n_past=step)
        cache = out.cache
        best_lp, best = _step_log_probs(model, out.logits).max(dim=-1)
        best = best.masked_fill(finished, cfg.pad_id)
        scores += torch.where(finished, torch.zeros_like(best_lp), best_lp)
        generated.append(best)
        finished |= (best == cfg.eos_id) | (step + 1 >= limits)
        last = best.unsqueeze(1)
        if bool(finished.all()):
            break
    rows = torch.stack(generated, dim=1).tolist()
    hyps = []
    for row, score in zip(rows, scores.tolist(), strict=True):
        tokens = row[: row.index(cfg.eos_id)] if cfg.eos_id in row else row
        tokens = [t for t in tokens if t != cfg.pad_id]
        hyps.append(Hypothesis(tokens, score, score))
    return hyps


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: Tensor,
    beam_size: int = DEFAULT_BEAM,
    max_length: int | None = None,
    length_penalty: float = DEFAULT_LENGTH_PENALTY,
    n_best: int = 1,
) -> list[list[Hypothesis]]:
    """Returns, per sentence, the n_best hypotheses, best first."""
    cfg = model.cfg
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be in 1..beam_size ({beam_size}), got {n_best}")
    limits = _limits(model, src, max_length)
    batch, k = src.size(0), beam_size
    enc = model.encode(src)
    src_mask = enc.src_mask.repeat_interleave(k, dim=0)  # (batch*k, src)
    kv = [(a.repeat_interleave(k, dim=0), b.repeat_interleave(k, dim=0)) for a, b in model.cross_kv(enc.memory)]
    beam_scores = torch.zeros(batch, k, dtype=torch.float64)
    beam_scores[:, 1:] = float("-inf")  # all beams start identical: keep one alive
    tokens = torch.full((batch * k, 1), cfg.bos_id, dtype=torch.long)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    done = [False] * batch
    cache = None
    for step in range(max(limits)):
        out = model.decode(tokens[:, -1:], kv, src_mask, cache, n_past=step)
        log_probs = _step_log_probs(model, out.logits)  # (batch*k, vocab)
        vocab = log_probs.size(-1)
        candidates = (beam_scores.view(-1, 1) + log_probs).view(batch, k * vocab)
        top_scores, top_index = candidates.topk(2 * k, dim=-1)  # (batch, 2k)
        rows = torch.arange(batch * k).view(batch, k)  # default: finished sentences keep their rows
        next_tokens = torch.full((batch, k), cfg.pad_id, dtype=torch.long)
        next_scores = torch.full((batch, k), float("-inf"), dtype=torch.float64)
        for b in range(batch):
            if done[b]:
                continue
            filled = 0
            for rank in range(2 * k):
                score = float(top_scores[b, rank])
                beam, token = divmod(int(top_index[b, rank]), vocab)
                row = b * k + beam
                if token == cfg.eos_id:
                    if rank < k:
                        finished[b].append(Hypothesis.beam(tokens[row, 1:].tolist(), score, step + 1, length_penalty))
                    continue
                rows[b, filled], next_tokens[b, filled], next_scores[b, filled] = row, token, score
                filled += 1
                if filled == k:
                    break
            if len(finished[b]) >= k:
                done[b] = True
            elif step + 1 >= limits[b]:  # length limit: the live hypotheses end as they are
                for beam in range(k):
                    seq = tokens[int(rows[b, beam]), 1:].tolist() + [int(next_tokens[b, beam])]
                    score = float(next_scores[b, beam])
                    finished[b].append(Hypothesis.beam(seq, score, len(seq), length_penalty))
                done[b] = True
        if all(done):
            break
        rows = rows.view(-1)
        tokens = torch.cat([tokens[rows], next_tokens.view(-1, 1)], dim=1)
        cache = [(a[rows], v[rows]) for a, v in out.cache]
        beam_scores = next_scores
    return [sorted(f, key=lambda h: -h.normalized)[:n_best] for f in finished]
