"""Training loop: label smoothing, Adam + Noam, clipping, validation BLEU, checkpoint averaging, resume, DDP."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from model.checkpoint import (
    TOKENIZER_FILE,
    average_state_dicts,
    load_training_state,
    save_release,
    save_training_state,
)
from model.config import RunConfig
from model.data import Batch, Example, encode_pairs, make_batches, read_parallel
from model.evaluate import evaluate
from model.losses import label_smoothed_nll
from model.plots import plot_training_curve
from model.schedule import noam_lr
from model.tokenizer import Tokenizer, train_tokenizer
from model.transformer import Transformer


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    _, keys, pos, *_ = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "python": list(random.getstate()[1]),
        "numpy": torch.from_numpy(keys.astype(np.int64)),
        "numpy_pos": int(pos),
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), state["numpy_pos"], 0, 0.0))


class Trainer:
    """One run's state. ``out_dir`` gets tokenizer.model, checkpoints/, log.jsonl, curve.png, release/."""

    def __init__(self, run: RunConfig, data_dir: str | Path, out_dir: str | Path, progress: bool = True) -> None:
        self.run, self.cfg = run, run.train
        self.data_dir, self.out = Path(data_dir), Path(out_dir)
        self.ckpt_dir = self.out / "checkpoints"
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        self.progress = progress and self.rank == 0
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        seed_everything(self.cfg.seed)

        self.tokenizer = self._tokenizer()
        if run.model.vocab_size != self.tokenizer.vocab_size:
            raise ValueError(f"model vocab_size {run.model.vocab_size} != tokenizer's {self.tokenizer.vocab_size}")
        src, tgt = read_parallel(self.data_dir, run.train_prefix, run.source_lang, run.target_lang)
        self.train_examples = encode_pairs(self.tokenizer, src, tgt, self.cfg.max_length)
        self.valid_src, self.valid_tgt = read_parallel(
            self.data_dir, run.valid_prefix, run.source_lang, run.target_lang
        )
        self.valid_examples = encode_pairs(self.tokenizer, self.valid_src, self.valid_tgt)

        self.model = Transformer(run.model)
        self.ddp = DistributedDataParallel(self.model) if self.world > 1 else None
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=1.0, betas=self.cfg.adam_betas, eps=self.cfg.adam_eps
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda step: noam_lr(step + 1, run.model.d_model, self.cfg.warmup_steps, self.cfg.lr_factor),
        )
        self.step = self.epoch = self.batch_in_epoch = 0
        self.history: list[dict[str, Any]] = []
        self.best_bleu = -1.0
        last = self.ckpt_dir / "last.pt"
        if last.exists():
            self.load(last)

    def _tokenizer(self) -> Tokenizer:
        path = self.out / TOKENIZER_FILE
        if not path.exists() and self.rank == 0:
            src, tgt = read_parallel(self.data_dir, self.run.train_prefix, self.run.source_lang, self.run.target_lang)
            tc = self.run.tokenizer
            train_tokenizer(src + tgt, path, tc.vocab_size, tc.model_type, tc.character_coverage)
        if self.world > 1:
            dist.barrier()
        return Tokenizer(path)

    # --- state -------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "rng": _rng_state(),
            "history": json.dumps(self.history),
            "best_bleu": self.best_bleu,
            "run_config": json.dumps(self.run.to_dict()),
        }

    def load(self, path: Path) -> None:
        state = load_training_state(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.epoch, self.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        self.history = json.loads(state["history"])
        self.best_bleu = state["best_bleu"]
        _set_rng_state(state["rng"])

    def save(self) -> None:
        if self.rank != 0:
            return
        state = self.state()
        save_training_state(self.ckpt_dir / f"step{self.step:07d}.pt", state)
        save_training_state(self.ckpt_dir / "last.pt", state)
        kept = sorted(self.ckpt_dir.glob("step*.pt"))
        for old in kept[: -self.cfg.keep_checkpoints]:
            old.unlink()

    # --- steps -------------------------------------------------------------------------------
    def epoch_batches(self, epoch: int) -> list[list[int]]:
        batches = make_batches(self.train_examples, self.cfg.max_tokens, seed=self.cfg.seed + epoch)
        usable = len(batches) - len(batches) % self.world  # every rank takes the same number of steps
        return batches[self.rank : usable : self.world]

    def train_step(self, batch: Batch) -> float:
        self.model.train()
        net = self.ddp or self.model
        logits = net(batch.src, batch.tgt_in)
        loss_sum, _ = label_smoothed_nll(logits, batch.tgt_out, self.cfg.label_smoothing, self.run.model.pad_id)
        loss = loss_sum / max(batch.n_tokens, 1)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return loss.item()

    @torch.no_grad()
    def validation_loss(self, examples: list[Example]) -> float:
        self.model.eval()
        total = tokens = 0.0
        for idx in make_batches(examples, self.cfg.max_tokens):
            batch = Batch.from_examples([examples[i] for i in idx])
            _, nll = label_smoothed_nll(self.model(batch.src, batch.tgt_in), batch.tgt_out, 0.0, self.run.model.pad_id)
            total, tokens = total + float(nll), tokens + batch.n_tokens
        return total / tokens

    def validate(self, train_loss: float) -> dict[str, Any]:
        n = self.cfg.bleu_max_sentences or len(self.valid_src)
        result, _ = evaluate(
            self.model, self.tokenizer, self.valid_src[:n], self.valid_tgt[:n], self.cfg.bleu_beam_size
        )
        record = {
            "step": self.step,
            "epoch": self.epoch,
            "train_loss": round(train_loss, 4),
            "valid_nll": round(self.validation_loss(self.valid_examples), 4),
            "valid_bleu": result["bleu"],
            "lr": self.scheduler.get_last_lr()[0],
            "time": time.time(),
        }
        self.history.append(record)
        with open(self.out / "log.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if record["valid_bleu"] > self.best_bleu:
            self.best_bleu = record["valid_bleu"]
            save_release(self.out / "best", self.model, {"step": self.step, "valid_bleu": self.best_bleu})
        plot_training_curve(self.history, self.out / "curve.png")
        return record

    def total_steps(self) -> int:
        per_epoch = len(self.epoch_batches(0))
        total = per_epoch * self.cfg.epochs
        return min(total, self.cfg.max_steps) if self.cfg.max_steps else total

    def train(self) -> None:
        total = self.total_steps()
        bar = tqdm(total=total, initial=self.step, disable=not self.progress, unit="step", mininterval=5)
        running, tokens, started = 0.0, 0, time.time()
        while self.epoch < self.cfg.epochs and self.step < total:
            batches = self.epoch_batches(self.epoch)
            for position in range(self.batch_in_epoch, len(batches)):
                if self.step >= total:
                    break
                batch = Batch.from_examples([self.train_examples[i] for i in batches[position]])
                loss = self.train_step(batch)
                self.batch_in_epoch = position + 1
                running = loss if running == 0 else 0.98 * running + 0.02 * loss
                tokens += batch.n_tokens
                lr = self.scheduler.get_last_lr()[0]
                bar.set_postfix(
                    epoch=self.epoch,
                    loss=f"{running:.3f}",
                    lr=f"{lr:.2e}",
                    tok_s=f"{tokens / (time.time() - started):.0f}",
                    refresh=False,
                )
                bar.update(1)
                if self.step % self.cfg.eval_every == 0:
                    self._checkpoint(running)
            else:
                self.epoch, self.batch_in_epoch = self.epoch + 1, 0
        if not self.history or self.history[-1]["step"] != self.step:
            self._checkpoint(running)
        bar.close()

    def _checkpoint(self, train_loss: float) -> None:
        if self.rank == 0:
            record = self.validate(train_loss)
            tqdm.write(json.dumps(record))
        self.save()
        if self.world > 1:
            dist.barrier()

    # --- release -----------------------------------------------------------------------------
    def finalize(self) -> dict[str, Any]:
        """Average the last N checkpoints; release whichever of (average, best) scores higher on val."""
        if self.rank != 0:
            return {}
        kept = sorted(self.ckpt_dir.glob("step*.pt"))
        candidates = {"best": self.out / "best"}
        if len(kept) > 1:
            self.model.load_state_dict(average_state_dicts(kept))
            save_release(self.out / "averaged", self.model, {"averaged": [p.name for p in kept]})
            candidates["averaged"] = self.out / "averaged"
        from model.checkpoint import load_release

        scores = {}
        for name, path in candidates.items():
            model, _ = load_release(path)
            scores[name] = evaluate(model, self.tokenizer, self.valid_src, self.valid_tgt, 1)[0]["bleu"]
        chosen = max(scores, key=scores.get)
        model, _ = load_release(candidates[chosen])
        summary = {
            "chosen": chosen,
            "valid_bleu_greedy": scores,
            "steps": self.step,
            "epochs": self.epoch,
            "parameters": model.num_parameters(),
            "train_seconds": _train_seconds(self.history),
        }
        release = self.out / "release"
        save_release(release, model, {"run": self.run.to_dict(), "training": summary})
        (release / TOKENIZER_FILE).write_bytes((self.out / TOKENIZER_FILE).read_bytes())
        return summary


def _train_seconds(history: list[dict[str, Any]]) -> float | None:
    if len(history) < 2:
        return None  # unknown; JSON null (NaN would make the release config and bundle manifest invalid JSON)
    return round(history[-1]["time"] - history[0]["time"], 1)
