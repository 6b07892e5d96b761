"""Label-smoothed cross-entropy (Szegedy et al. 2016, as used by Vaswani et al. 2017).

The loss is computed a block of rows at a time, with its gradient written out analytically (softmax minus the
smoothed target distribution), so that no (tokens, vocabulary) float32 tensor is ever materialized: autograd's
log_softmax / gather / sum chain made about ten passes over 4,000 x 24,000 floats per step and took 0.58 s of a
2.0 s training step on 2 CPU cores; this takes 0.14 s (docs/models-round3.md, "Training speed").
"""

from __future__ import annotations

import threading

import torch
from torch import Tensor

BLOCK_BYTES = 6 << 20  # rows per block: about this many bytes of float32 logits (stays in cache)


def _wide(logits: Tensor) -> torch.dtype:
    return torch.promote_types(logits.dtype, torch.float32)  # bf16 / fp16 -> fp32; fp32 and fp64 stay


def _block_rows(k: int) -> int:
    return max(1, BLOCK_BYTES // (4 * k))


def _block_terms(z: Tensor, t: Tensor, lse: Tensor, k: int, epsilon: float) -> tuple[Tensor, Tensor]:
    """Per row of a block of (at least float32) logits with their logsumexp: (smoothed loss, NLL) of target t."""
    true_lp = z.gather(-1, t.unsqueeze(-1)).squeeze(-1) - lse
    other_lp = z.sum(-1) - k * lse - true_lp  # the sum of the other classes' log-probabilities
    return -(1.0 - epsilon) * true_lp - (epsilon / (k - 1)) * other_lp, -true_lp


def _block_gradient_(
    z: Tensor, lse: Tensor, t: Tensor, scale: Tensor | None, shift: Tensor | float, at_target: Tensor | float
) -> None:
    """Overwrite a block of logits with ``scale * softmax(z) - shift``, plus ``at_target`` at each row's target
    (the gradient of the smoothed loss and the NLL: softmax minus the target distribution). scale None: 1."""
    z.sub_(lse.unsqueeze(-1)).exp_()
    if scale is not None:
        z.mul_(scale)
    z.sub_(shift)
    z[torch.arange(z.size(0), device=z.device), t] += at_target


class _LabelSmoothedNLL(torch.autograd.Function):
    """(smoothed loss sum, NLL sum) over the tokens whose target is not ``ignore_index``; see label_smoothed_nll."""

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float, ignore_index: int) -> tuple[Tensor, Tensor]:
        k = logits.size(-1)
        flat = logits.reshape(-1, k)
        keep = (target != ignore_index).reshape(-1)
        safe = target.reshape(-1).masked_fill(~keep, 0)
        wide = _wide(logits)
        lse = torch.empty(flat.size(0), dtype=wide, device=logits.device)
        loss, nll = torch.empty_like(lse), torch.empty_like(lse)
        step = _block_rows(k)
        for i in range(0, flat.size(0), step):
            z, rows = flat[i : i + step].to(wide), slice(i, i + step)
            torch.logsumexp(z, dim=-1, out=lse[rows])
            loss[rows], nll[rows] = _block_terms(z, safe[rows], lse[rows], k, epsilon)
        zero = torch.zeros((), dtype=wide, device=logits.device)
        ctx.save_for_backward(logits, lse, safe, keep)
        ctx.epsilon = epsilon
        return torch.where(keep, loss, zero).sum(), torch.where(keep, nll, zero).sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        # d loss / d z = softmax(z) - q, q = 1 - eps at the target and eps / (K - 1) elsewhere; d nll / d z =
        # softmax(z) - onehot(target); both zero for ignored tokens
        logits, lse, safe, keep = ctx.saved_tensors
        eps, k = ctx.epsilon, logits.size(-1)
        other = eps / (k - 1)
        flat = logits.reshape(-1, k)
        wide = lse.dtype
        scale, shift = (grad_loss + grad_nll).to(wide), (grad_loss * other).to(wide)
        at_target = (-(grad_loss * (1.0 - eps - other) + grad_nll)).to(wide)
        grad = torch.empty_like(flat)
        step = _block_rows(k)
        for i in range(0, flat.size(0), step):
            g = flat[i : i + step].to(wide, copy=True)
            _block_gradient_(g, lse[i : i + step], safe[i : i + step], scale, shift, at_target)
            g.mul_(keep[i : i + step].unsqueeze(-1))
            grad[i : i + step] = g
        return grad.view_as(logits), None, None, None


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, ignore_index: int) -> tuple[Tensor, Tensor]:
    """Sum over non-ignored tokens of the cross-entropy against a smoothed target distribution.

    The true class gets probability 1 - eps and every other class eps / (K - 1).
    logits: (..., K), any float dtype (computed in at least float32); target: (...).
    Returns (smoothed loss sum, plain NLL sum), both differentiable with respect to the logits.
    """
    return _LabelSmoothedNLL.apply(logits, target, epsilon, ignore_index)


_workspaces = threading.local()


def _workspace(rows: int, k: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A (rows, k) buffer that lives as long as the thread: it grows to the largest batch and is then reused, so a
    training step does not allocate and free a (tokens, vocabulary) tensor of a new size every time (on glibc with
    raised thresholds, model/malloc_tuning.py, such buffers of varying sizes fragmented the heap)."""
    key = (dtype, device)
    cache = getattr(_workspaces, "buffers", None)
    if cache is None:
        cache = _workspaces.buffers = {}
    buffer = cache.get(key)
    if buffer is None or buffer.numel() < rows * k:
        cache.pop(key, None)
        buffer = cache[key] = torch.empty(rows * k, dtype=dtype, device=device)
    return buffer[: rows * k].view(rows, k)


class _ProjectedLabelSmoothedNLL(torch.autograd.Function):
    """label_smoothed_nll of ``hidden @ weight.T + bias``, non-ignored rows only; see projected_label_smoothed_nll."""

    @staticmethod
    def forward(
        ctx,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        target: Tensor,
        epsilon: float,
        ignore_index: int,
        dtype: torch.dtype,
        need_grad: bool,
    ) -> tuple[Tensor, Tensor]:
        d, k = hidden.size(-1), weight.size(0)
        rows = (target.reshape(-1) != ignore_index).nonzero().squeeze(1)
        h = hidden.reshape(-1, d).index_select(0, rows).to(dtype)
        t = target.reshape(-1).index_select(0, rows)
        w = weight.to(dtype)
        b = None if bias is None else bias.to(dtype)
        z = _workspace(h.size(0), k, dtype, h.device)  # the logits, then (when need_grad) their gradient
        if b is None:
            torch.mm(h, w.t(), out=z)
        else:
            torch.addmm(b, h, w.t(), out=z)
        wide = _wide(z)
        other = epsilon / (k - 1)
        loss = torch.zeros((), dtype=wide, device=h.device)
        nll = torch.zeros_like(loss)
        grad_b = torch.zeros(k, dtype=wide, device=h.device) if need_grad and b is not None else None
        step = _block_rows(k)
        for i in range(0, z.size(0), step):
            block, tb = z[i : i + step], t[i : i + step]
            zb = block.to(wide)  # a float32 copy of a bfloat16 block (stays in cache); float32 logits: the block
            lse = torch.logsumexp(zb, dim=-1)
            block_loss, block_nll = _block_terms(zb, tb, lse, k, epsilon)
            loss += block_loss.sum()
            nll += block_nll.sum()
            if need_grad:  # d loss / d z = softmax(z) - q, q = 1 - eps at the target and eps / (K - 1) elsewhere
                _block_gradient_(zb, lse, tb, None, other, -(1.0 - epsilon - other))
                if grad_b is not None:
                    grad_b += zb.sum(0)
                if zb.data_ptr() != block.data_ptr():
                    block.copy_(zb)
        grad_h = grad_w = None
        if need_grad:
            grad_h = z @ w  # (rows, d)
            grad_w = z.t() @ h  # (k, d)
        ctx.mark_non_differentiable(nll)
        ctx.save_for_backward(rows, grad_h, grad_w, grad_b)
        ctx.shapes = hidden.shape, hidden.dtype, weight.dtype, None if bias is None else bias.dtype
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        rows, grad_h, grad_w, grad_b = ctx.saved_tensors
        if grad_h is None:
            raise RuntimeError("projected_label_smoothed_nll was computed without its gradient (need_grad False)")
        shape, hidden_dtype, weight_dtype, bias_dtype = ctx.shapes
        grad_hidden = torch.zeros(shape.numel() // shape[-1], shape[-1], dtype=hidden_dtype, device=grad_h.device)
        grad_hidden.index_copy_(0, rows, grad_h.to(hidden_dtype, copy=True).mul_(grad_loss))
        grad_weight = grad_w.to(weight_dtype, copy=True).mul_(grad_loss)
        grad_bias = None if grad_b is None else grad_b.to(bias_dtype, copy=True).mul_(grad_loss)
        return grad_hidden.view(shape), grad_weight, grad_bias, None, None, None, None, None


def projected_label_smoothed_nll(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    target: Tensor,
    epsilon: float,
    ignore_index: int,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor]:
    """label_smoothed_nll(hidden @ weight.T + bias, ...), computed with the output projection.

    Only the rows whose target is not ``ignore_index`` are projected. The logits are written into a per-thread
    buffer that is reused from step to step, and the loss, computed a block of rows at a time as in
    label_smoothed_nll, overwrites them with their gradient; the loss being the end of the graph, the gradients
    with respect to ``hidden``, ``weight`` and ``bias`` are computed in the same call and only scaled in backward.
    hidden: (..., d); weight: (K, d); bias: (K,) or None; target: (...). ``dtype``: the precision of the products
    (an autocast dtype; default hidden's); the loss is computed in at least float32.
    Returns (smoothed loss sum, plain NLL sum); only the first is differentiable.
    """
    need_grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (hidden, weight, bias))
    dtype = hidden.dtype if dtype is None else dtype
    return _ProjectedLabelSmoothedNLL.apply(hidden, weight, bias, target, epsilon, ignore_index, dtype, need_grad)
