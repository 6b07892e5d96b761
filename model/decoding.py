"""Reference decoding in PyTorch: batched greedy and beam search over the key/value cache.

The onnxruntime engine in ``service/`` implements the same algorithm in numpy and must give the
same hypotheses. Conventions shared by both:
- a hypothesis score is the sum of the log-probabilities of its generated tokens, EOS included;
- beam hypotheses are ranked by score / lp, lp = ((5 + length) / 6) ** length_penalty (Wu et al.
  2016), length counting EOS; length_penalty 0 ranks by raw score;
- each step takes the top 2 * beam candidates; EOS candidates among the first ``beam`` end a
  hypothesis, the others fill the next beam; a sentence is done once ``beam`` hypotheses ended;
  at the length limit the live hypotheses end as they are;
- max_length default: 2 * source length + 10 tokens, capped by the model's positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from model.transformer import Transformer


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, EOS excluded
    score: float  # sum of log-probs (EOS included when generated)
    normalized: float  # score / length penalty (equals score for greedy)


def default_max_length(src_len: int, max_positions: int) -> int:
    return min(2 * src_len + 10, max_positions - 1)


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


def _max_length(model: Transformer, src: Tensor, max_length: int | None) -> int:
    limit = model.cfg.max_positions - 1
    if max_length is None:
        return default_max_length(src.size(1), model.cfg.max_positions)
    return min(max_length, limit)


@torch.no_grad()
def greedy_search(model: Transformer, src: Tensor, max_length: int | None = None) -> list[Hypothesis]:
    cfg = model.cfg
    steps = _max_length(model, src, max_length)
    enc = model.encode(src)
    kv = model.cross_kv(enc.memory)
    batch = src.size(0)
    last = torch.full((batch, 1), cfg.bos_id, dtype=torch.long)
    finished = torch.zeros(batch, dtype=torch.bool)
    scores = torch.zeros(batch, dtype=torch.float64)
    generated: list[Tensor] = []
    cache = None
    for _ in range(steps):
        out = model.decode(last, kv, enc.src_mask, cache)
        cache = out.cache
        log_probs = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        best_lp, best = log_probs.max(dim=-1)
        best = best.masked_fill(finished, cfg.pad_id)
        scores += torch.where(finished, torch.zeros_like(best_lp), best_lp).double()
        generated.append(best)
        finished |= best == cfg.eos_id
        last = best.unsqueeze(1)
        if bool(finished.all()):
            break
    rows = torch.stack(generated, dim=1).tolist() if generated else [[] for _ in range(batch)]
    hyps = []
    for row, score in zip(rows, scores.tolist(), strict=True):
        tokens = row[: row.index(cfg.eos_id)] if cfg.eos_id in row else row
        hyps.append(Hypothesis(tokens, score, score))
    return hyps


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: Tensor,
    beam_size: int = 4,
    max_length: int | None = None,
    alpha: float = 0.6,
    n_best: int = 1,
) -> list[list[Hypothesis]]:
    """Returns, per sentence, the n_best hypotheses, best first."""
    cfg = model.cfg
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be in 1..beam_size ({beam_size}), got {n_best}")
    steps = _max_length(model, src, max_length)
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
    for step in range(steps):
        out = model.decode(tokens[:, -1:], kv, src_mask, cache)
        log_probs = torch.log_softmax(out.logits[:, -1].double(), dim=-1)  # (batch*k, vocab)
        vocab = log_probs.size(-1)
        candidates = (beam_scores.view(-1, 1) + log_probs).view(batch, k * vocab)
        top_scores, top_index = candidates.topk(2 * k, dim=-1)  # (batch, 2k)
        next_rows = torch.zeros(batch, k, dtype=torch.long)
        next_tokens = torch.full((batch, k), cfg.pad_id, dtype=torch.long)
        next_scores = torch.full((batch, k), float("-inf"), dtype=torch.float64)
        for b in range(batch):
            if done[b]:
                continue
            filled = 0
            for rank in range(2 * k):
                score = float(top_scores[b, rank])
                if score == float("-inf"):
                    break
                beam, token = divmod(int(top_index[b, rank]), vocab)
                row = b * k + beam
                if token == cfg.eos_id:
                    if rank < k:
                        length = step + 1
                        finished[b].append(
                            Hypothesis(tokens[row, 1:].tolist(), score, score / length_penalty(length, alpha))
                        )
                    continue
                next_rows[b, filled], next_tokens[b, filled], next_scores[b, filled] = row, token, score
                filled += 1
                if filled == k:
                    break
            if len(finished[b]) >= k:
                done[b] = True
        if all(done):
            break
        rows = next_rows.view(-1)
        for b in range(batch):  # rows of finished sentences point at themselves (ignored)
            if done[b]:
                rows[b * k : (b + 1) * k] = torch.arange(b * k, (b + 1) * k)
        tokens = torch.cat([tokens[rows], next_tokens.view(-1, 1)], dim=1)
        cache = [(a[rows], v[rows]) for a, v in out.cache]
        beam_scores = next_scores
    else:
        for b in range(batch):
            if not done[b]:
                for beam in range(k):
                    score = float(beam_scores[b, beam])
                    if score > float("-inf"):
                        seq = tokens[b * k + beam, 1:].tolist()
                        finished[b].append(Hypothesis(seq, score, score / length_penalty(len(seq), alpha)))
    return [sorted(f, key=lambda h: -h.normalized)[:n_best] for f in finished]
