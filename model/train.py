"""Training loop: label smoothing, Adam + Noam, clipping, validation BLEU, checkpoint averaging, resume, DDP.

Every epoch has one order of batches (the in-memory pairs or the streamed shards, model/data.py
``BatchSource``) that every rank computes alike; the ranks take it in turn, rank r the r-th batch of each
round of ``world`` batches, and an update sums the gradients of ``accumulate`` rounds. A checkpoint records
the position in that order (batches taken by all ranks together), so it resumes on any number of ranks.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from model.checkpoint import (
    TOKENIZER_FILE,
    average_state_dicts,
    load_training_state,
    save_release,
    save_training_state,
)
from model.config import RunConfig, TrainConfig
from model.data import (
    IN_MEMORY,
    Batch,
    BatchSource,
    Example,
    ExampleBatches,
    encode_pairs,
    make_batches,
    read_parallel,
)
from model.directions import bleu_tokenizer, direction_of_line, split_tag
from model.evaluate import bleu, evaluate
from model.losses import label_smoothed_nll, projected_label_smoothed_nll
from model.malloc_tuning import RestartForMemory, release_free_memory, restart_for_memory
from model.plots import plot_training_curve
from model.precision import autocast_dtype, needs_grad_scaler
from model.schedule import noam_lr
from model.shards import ShardReader
from model.stop_signals import StopRequest, TrainingStopped, stop_on_signals
from model.tokenizer import Tokenizer, train_tokenizer
from model.transformer import Transformer


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _rng_state(cuda: bool = False) -> dict[str, Any]:
    _, keys, pos, *_ = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": list(random.getstate()[1]),
        "numpy": torch.from_numpy(keys.astype(np.int64)),
        "numpy_pos": int(pos),
    }
    if cuda:  # dropout on the GPU draws from the device's generator
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any], cuda: bool = False) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), state["numpy_pos"], 0, 0.0))
    if cuda and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])


@dataclass(frozen=True)
class TrainingData:
    """The training pairs (encoded in memory, or streamed from shards) and the validation split (raw text for
    BLEU, encoded for the loss)."""

    train_examples: list[Example]
    valid_src: list[str]
    valid_tgt: list[str]
    valid_examples: list[Example]
    train_shards: ShardReader | None = None  # set: the training pairs come from here, train_examples is empty


# --- the named set-up steps Trainer.from_run runs, in this order ------------------------------------


def resolve_device(cfg: TrainConfig) -> torch.device:
    """The device TrainConfig.device names ("" = cuda where a GPU is visible, else the CPU); under torchrun each
    process takes the GPU of its LOCAL_RANK."""
    wanted = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if wanted == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("device cuda: torch sees no GPU")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    return device


def init_distributed(backend: str = "gloo") -> tuple[int, int]:
    """``(rank, world)`` from torchrun's environment; joins the process group when ``world > 1`` (nccl for
    CUDA tensors, gloo for CPU ones). Under an elastic torchrun the world may differ between restarts."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend)
    return rank, world


def seed_process(cfg: TrainConfig) -> None:
    """Thread count and seeds (Python, NumPy, torch) of this process, before anything random is built."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)


def _architecture(model: dict[str, Any]) -> dict[str, Any]:
    """A model config without its dropout rates: training's regularisation, which a fine-tuning run may change."""
    return {k: v for k, v in model.items() if k not in ("dropout", "attention_dropout", "activation_dropout")}


def prepare_tokenizer(
    run: RunConfig, data_dir: str | Path, out_dir: str | Path, rank: int = 0, world: int = 1
) -> Tokenizer:
    """``out_dir/tokenizer.model``, trained by rank 0 on the training split if missing; must fit the model's vocab."""
    path = Path(out_dir) / TOKENIZER_FILE
    if not path.exists() and rank == 0 and run.train.init_from:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((Path(run.train.init_from) / TOKENIZER_FILE).read_bytes())  # its weights need its ids
    elif not path.exists() and rank == 0 and run.train.shards:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((Path(run.train.shards) / TOKENIZER_FILE).read_bytes())  # the shards hold its ids
    elif not path.exists() and rank == 0:
        src, tgt = read_parallel(data_dir, run.train_prefix, run.source_lang, run.target_lang)
        tc = run.tokenizer
        texts = [split_tag(t)[1] for t in src + tgt] if tc.user_symbols else src + tgt
        train_tokenizer(texts, path, tc.vocab_size, tc.model_type, tc.character_coverage, user_symbols=tc.user_symbols)
    if world > 1:
        dist.barrier()
    tokenizer = Tokenizer(path)
    if run.model.vocab_size != tokenizer.vocab_size:
        raise ValueError(f"model vocab_size {run.model.vocab_size} != tokenizer's {tokenizer.vocab_size}")
    return tokenizer


def load_data(run: RunConfig, data_dir: str | Path, tokenizer: Tokenizer) -> TrainingData:
    """Read and encode the training split (pairs longer than ``max_length`` dropped), or open its shards when the
    run names them (they must be the tokenizer's), and the validation split."""
    shards = ShardReader(run.train.shards, tokenizer) if run.train.shards else None
    if shards is None:
        src, tgt = read_parallel(data_dir, run.train_prefix, run.source_lang, run.target_lang)
    valid_src, valid_tgt = read_parallel(data_dir, run.valid_prefix, run.source_lang, run.target_lang)
    return TrainingData(
        train_examples=[] if shards else encode_pairs(tokenizer, src, tgt, run.train.max_length),
        train_shards=shards,
        valid_src=valid_src,
        valid_tgt=valid_tgt,
        # the loss needs every pair inside the position table; BLEU translates them all (sources truncated)
        valid_examples=encode_pairs(tokenizer, valid_src, valid_tgt, run.model.max_positions - 1),
    )


def build_optimizer(
    run: RunConfig, model: Transformer
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """Adam (base lr 1) and the Noam schedule as a LambdaLR multiplier."""
    cfg = run.train
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=cfg.adam_betas, eps=cfg.adam_eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: noam_lr(step + 1, run.model.d_model, cfg.warmup_steps, cfg.lr_factor)
    )
    return optimizer, scheduler


class Trainer:
    """One run's state. ``out_dir`` gets tokenizer.model, checkpoints/, log.jsonl, curve.png, release/.

    The constructor only stores parts that are already built (it reads and writes nothing);
    :meth:`from_run` builds them from a run config, a corpus folder and a run folder, and resumes.
    """

    def __init__(
        self,
        run: RunConfig,
        tokenizer: Tokenizer,
        data: TrainingData,
        model: Transformer,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LambdaLR,
        out_dir: str | Path,
        *,
        ddp: DistributedDataParallel | None = None,
        rank: int = 0,
        world: int = 1,
        progress: bool = True,
        device: torch.device | None = None,
    ) -> None:
        self.run, self.cfg = run, run.train
        self.out = Path(out_dir)
        self.ckpt_dir = self.out / "checkpoints"
        self.rank, self.world = rank, world
        self.progress = progress and rank == 0
        # the output projection inside the loss (model/losses.py); False: logits, then the loss (bench.train_speed)
        self.projected_loss = True
        self.memory_restart: tuple[int, int] | None = None  # (resident, free heap) bytes: restart the run
        self.new_data = False  # resume mid-epoch on other training data by starting the next epoch (from_run)
        self.device = device or torch.device("cpu")
        self.autocast_dtype = autocast_dtype(run.train.autocast, self.device.type)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=needs_grad_scaler(self.autocast_dtype))
        self.tokenizer = tokenizer
        self.train_examples = data.train_examples
        self.source: BatchSource = (
            data.train_shards.batches(self.cfg.max_tokens, self.cfg.seed)
            if data.train_shards is not None
            else ExampleBatches(data.train_examples, self.cfg.max_tokens, self.cfg.seed)
        )
        self.valid_src, self.valid_tgt = data.valid_src, data.valid_tgt
        self.valid_examples = data.valid_examples
        self.model, self.ddp = model, ddp
        self.optimizer, self.scheduler = optimizer, scheduler
        # batch_in_epoch: batches of the epoch's order taken so far, by all ranks together
        self.step = self.epoch = self.batch_in_epoch = 0
        self.update_tokens = 0  # target tokens of the last update, every rank's and every accumulated batch's
        self.history: list[dict[str, Any]] = []
        # the step of the last validation and checkpoint, known to every rank (only rank 0 appends to history)
        self.validated_step: int | None = None
        self.best_bleu = -1.0
        self.train_seconds = 0.0  # wall time of finished train() calls, summed across resumes
        self._train_started: float | None = None  # time.time() when the running train() call began
        self.data_dir: Path | None = None  # the corpus folder (from_run): its prepare.json goes with the release

    @classmethod
    def from_run(
        cls, run: RunConfig, data_dir: str | Path, out_dir: str | Path, progress: bool = True, new_data: bool = False
    ) -> Trainer:
        """Set up a run (device, process group, seeds, tokenizer, data, model, optimizer) and resume from last.pt;
        ``new_data``: the training pairs changed since (a corpus added): the next epoch starts on them."""
        device = resolve_device(run.train)
        rank, world = init_distributed("nccl" if device.type == "cuda" else "gloo")
        seed_process(run.train)
        tokenizer = prepare_tokenizer(run, data_dir, out_dir, rank, world)
        data = load_data(run, data_dir, tokenizer)
        model = Transformer(run.model).to(device)  # after seed_process: the initial weights follow the seed
        ddp = None
        if world > 1:
            ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        optimizer, scheduler = build_optimizer(run, model)
        parts = (run, tokenizer, data, model, optimizer, scheduler, out_dir)
        trainer = cls(*parts, ddp=ddp, rank=rank, world=world, progress=progress, device=device)
        trainer.data_dir, trainer.new_data = Path(data_dir), new_data
        if not trainer.resume_if_present() and run.train.init_from:
            trainer.init_weights(run.train.init_from)
        return trainer

    def init_weights(self, release_dir: str | Path) -> None:
        """Start from a released model's weights (fine-tuning); optimizer, schedule and position start fresh."""
        from model.checkpoint import load_release

        released, _ = load_release(release_dir)
        if _architecture(released.cfg.to_dict()) != _architecture(self.run.model.to_dict()):
            raise ValueError(f"{release_dir}: its model config differs from the run's; fine-tuning needs the same")
        self.model.load_state_dict(released.state_dict())

    def resume_if_present(self) -> bool:
        """Load ``checkpoints/last.pt`` when it exists (weights, optimizer, schedule, position, RNG, history)."""
        last = self.ckpt_dir / "last.pt"
        if not last.exists():
            return False
        self.load(last)
        return True

    # --- state -------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "world": self.world,  # batch_in_epoch counts every rank's batches (checkpoints without it: one rank's)
            "train_data": self.source.identity,
            "rng": _rng_state(self.device.type == "cuda"),
            "history": json.dumps(self.history),
            "best_bleu": self.best_bleu,
            "run_config": json.dumps(self.run.to_dict()),
            "train_seconds": self.elapsed_train_seconds(),
        }
        if self.scaler.is_enabled():
            state["grad_scaler"] = self.scaler.state_dict()
        return state

    def load(self, path: Path) -> None:
        """Resume from a checkpoint this trainer wrote, or one written before streamed data, accumulation and
        elastic runs existed (without "world", "train_data", "grad_scaler"): its position counted one rank's
        batches, as many ranks as resume it now (a run could resume only on as many then)."""
        state = load_training_state(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"] * (1 if "world" in state else self.world)
        data = state.get("train_data", IN_MEMORY)
        same = data == self.source.identity or (data == IN_MEMORY and self.source.identity.startswith(IN_MEMORY))
        if self.batch_in_epoch and not same and not self.new_data:
            raise ValueError(
                f"{path} stopped mid-epoch on other training data ({data}; now {self.source.identity}): "
                "its position means nothing here (--new-data starts the next epoch on this data)"
            )
        # the old epoch's position means nothing in the new data's order; on the same data (the command given again,
        # a restart for memory) --new-data changes nothing
        if self.batch_in_epoch and self.new_data and not same:
            print(
                f"training data changed at step {self.step}, in epoch {self.epoch} (was {data}; now "
                f"{self.source.identity}): epoch {self.epoch + 1} starts on it",
                file=sys.stderr,
            )
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0
        if "grad_scaler" in state and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["grad_scaler"])
        self.history = json.loads(state["history"])
        self.validated_step = self.history[-1]["step"] if self.history else None
        self.best_bleu = state["best_bleu"]
        # Checkpoints written before "train_seconds" existed: the span between their validations, a lower bound.
        self.train_seconds = float(state.get("train_seconds", _validation_span(self.history) or 0.0))
        _set_rng_state(state["rng"], self.device.type == "cuda")

    def save(self, last_only: bool = False) -> None:
        """``last.pt`` (what resume reads) and, unless ``last_only``, ``step<N>.pt`` for the averaging; then
        every rank gives malloc's free pages back (model/malloc_tuning.py: the heap's holes, every few minutes). A
        one-process run also notes whether its heap is fragmented enough to restart (``memory_restart``).

        Rank 0 writes (each file whole: a temporary file renamed over it), the others do not: a run restarted
        at any moment resumes from the last complete checkpoint, on every rank."""
        if self.rank == 0:
            self._write_checkpoints(last_only)
        if self.world == 1:  # measured before the trim, which gives the holes' pages back only until reused
            self.memory_restart = restart_for_memory()
        release_free_memory()

    def _write_checkpoints(self, last_only: bool) -> None:
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        state = self.state()
        save_training_state(self.ckpt_dir / "last.pt", state)
        if last_only:
            return
        save_training_state(self.ckpt_dir / f"step{self.step:07d}.pt", state)
        kept = sorted(self.ckpt_dir.glob("step*.pt"))
        for old in kept[: -self.cfg.keep_checkpoints]:
            old.unlink()

    # --- steps -------------------------------------------------------------------------------
    def rounds(self, epoch: int, start: int = 0) -> Iterator[tuple[int, Any]]:
        """``(position after the round, this rank's batch key)`` for each round of ``world`` batches of the
        epoch's order from ``start``; a last round of fewer than ``world`` is left out (every rank takes the
        same number of steps). From 0 rank r takes batches r, r + world, ...: what DDP runs always took."""
        size = self.source.epoch_size(epoch)
        order = self.source.epoch_order(epoch, start)
        for n in range(1, (size - start) // self.world + 1):
            keys = list(islice(order, self.world))
            yield start + n * self.world, keys[self.rank]

    def updates(self, epoch: int, start: int = 0) -> Iterator[tuple[int, list[Any]]]:
        """``(position after the update, its batch keys)``: ``accumulate`` rounds per update (the epoch's last
        update may have fewer)."""
        rounds = self.rounds(epoch, start)
        while group := list(islice(rounds, self.cfg.accumulate)):
            yield group[-1][0], [key for _, key in group]

    def epoch_batches(self, epoch: int) -> list[Any]:
        """This rank's batch keys of a whole epoch, in order."""
        return [key for _, key in self.rounds(epoch)]

    def _on_device(self) -> contextlib.AbstractContextManager:
        """Tensors made without a device argument (the model's masks and positions, decoding) go to the run's
        device; on the CPU nothing changes."""
        return torch.device(self.device) if self.device.type != "cpu" else contextlib.nullcontext()

    def _update_tokens(self, batches: Sequence[Batch]) -> int:
        """Target tokens of one update: these batches' on every rank."""
        tokens = sum(b.n_tokens for b in batches)
        if self.world > 1 and dist.is_initialized():
            total = torch.tensor([tokens], dtype=torch.int64, device=self.device)
            dist.all_reduce(total)
            tokens = int(total.item())
        return tokens

    def batch_loss(
        self, net: torch.nn.Module, batch: Batch, epsilon: float, dtype: torch.dtype | None
    ) -> tuple[Tensor, Tensor]:
        """(label-smoothed loss sum, NLL sum) of one batch on the device, the model under autocast to ``dtype``
        (None: none). With ``projected_loss`` the output projection is computed inside the loss
        (model/losses.py's projected_label_smoothed_nll), else the model's logits go to label_smoothed_nll."""
        pad = self.run.model.pad_id
        with torch.autocast(self.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            out = net(batch.src, batch.tgt_in, project=not self.projected_loss)
        if not self.projected_loss:
            return label_smoothed_nll(out, batch.tgt_out, epsilon, pad)
        output = self.model.output
        return projected_label_smoothed_nll(out, output.weight, output.bias, batch.tgt_out, epsilon, pad, dtype)

    def train_step(self, batches: Batch | Sequence[Batch]) -> float:
        """One update from one batch or several (accumulated): returns the loss per target token.

        Each batch's loss sum is divided by the target tokens of the whole update, all ranks' together, and
        multiplied by ``world`` because DDP averages the ranks' gradients: the summed gradient is that of one
        batch holding every token of the update. Ranks exchange gradients once, after the last batch."""
        batches = [batches] if isinstance(batches, Batch) else list(batches)
        self.model.train()
        net = self.ddp or self.model
        tokens = self._update_tokens(batches)
        self.optimizer.zero_grad(set_to_none=True)
        reported = 0.0
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            sync = self.ddp.no_sync() if self.ddp is not None and not last else contextlib.nullcontext()
            batch = batch.to(self.device)
            with sync, self._on_device():
                loss_sum, _ = self.batch_loss(net, batch, self.cfg.label_smoothing, self.autocast_dtype)
                loss = loss_sum / max(tokens, 1) * self.world
                self.scaler.scale(loss).backward()
            reported += loss.detach()
        self.scaler.unscale_(self.optimizer)  # clip the true gradients (fp16: scaled until here)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.scaler.step(self.optimizer)  # fp16: skipped when a gradient overflowed
        self.scaler.update()
        self.scheduler.step()
        self.step += 1
        self.update_tokens = tokens
        return float(reported)

    @torch.no_grad()
    def validation_loss(self, examples: list[Example]) -> float:
        self.model.eval()
        total = tokens = 0.0
        for idx in make_batches(examples, self.cfg.max_tokens):
            batch = Batch.from_examples([examples[i] for i in idx]).to(self.device)
            with self._on_device():
                _, nll = self.batch_loss(self.model, batch, 0.0, None)
            total, tokens = total + float(nll), tokens + batch.n_tokens
        return total / tokens

    def bleu_sample(self) -> tuple[list[str], list[str]]:
        """The validation sentences BLEU is measured on: ``bleu_max_sentences`` of them spread evenly over the
        split (a mixed split lists its corpora one after another: the first N would score only the first ones),
        or all of them."""
        n, total = self.cfg.bleu_max_sentences, len(self.valid_src)
        if not n or n >= total:
            return self.valid_src, self.valid_tgt
        picked = [i * total // n for i in range(n)]
        return [self.valid_src[i] for i in picked], [self.valid_tgt[i] for i in picked]

    def validate(self, train_loss: float) -> dict[str, Any]:
        sources, references = self.bleu_sample()
        with self._on_device():
            result, hyps = evaluate(self.model, self.tokenizer, sources, references, self.cfg.bleu_beam_size)
        valid_bleu, by_direction = validation_bleu(result, sources, references, hyps)
        record = {
            "step": self.step,
            "epoch": self.epoch,
            "train_loss": round(train_loss, 4),
            "valid_nll": round(self.validation_loss(self.valid_examples), 4),
            "valid_bleu": valid_bleu,
            "lr": self.scheduler.get_last_lr()[0],
            "time": time.time(),
        }
        if by_direction:
            record["valid_bleu_directions"] = by_direction
        self.history.append(record)
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / "log.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if record["valid_bleu"] > self.best_bleu:
            self.best_bleu = record["valid_bleu"]
            save_release(self.out / "best", self.model, {"step": self.step, "valid_bleu": self.best_bleu})
        plot_training_curve(self.history, self.out / "curve.png")
        return record

    def total_steps(self) -> int:
        """Updates of the whole run: ``epochs`` x (rounds of an epoch / accumulate), capped by ``max_steps``."""
        per_epoch = math.ceil(self.source.epoch_size(0) // self.world / self.cfg.accumulate)
        total = per_epoch * self.cfg.epochs
        return min(total, self.cfg.max_steps) if self.cfg.max_steps else total

    def elapsed_train_seconds(self) -> float:
        """Wall time spent in train() so far, this process's running call included, across resumes."""
        running = time.time() - self._train_started if self._train_started is not None else 0.0
        return self.train_seconds + running

    def train(self) -> None:
        """Train to the end of the run. On Ctrl-C or SIGTERM (one process only) the step in progress finishes,
        ``last.pt`` is written and TrainingStopped is raised: the same command resumes (model/stop_signals.py)."""
        self._train_started = time.time()
        try:
            with stop_on_signals(enabled=self.world == 1) as stop:
                self._train(stop)
        finally:
            self.train_seconds, self._train_started = self.elapsed_train_seconds(), None

    def _train(self, stop: StopRequest | None = None) -> None:
        total = self.total_steps()
        bar = tqdm(total=total, initial=self.step, disable=not self.progress, unit="step", mininterval=5)
        running, tokens, started = 0.0, 0, time.time()
        last_save = started
        while self.epoch < self.cfg.epochs and self.step < total:
            for position, keys in self.updates(self.epoch, self.batch_in_epoch):
                if self.step >= total:
                    break
                loss = self.train_step([self.source.batch(key) for key in keys])
                self.batch_in_epoch = position
                running = loss if running == 0 else 0.98 * running + 0.02 * loss
                tokens += self.update_tokens  # every rank's: the run's throughput
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
                    last_save = time.time()
                elif (
                    self.step < total
                    and self.cfg.save_minutes
                    and time.time() - last_save >= 60 * self.cfg.save_minutes
                ):
                    self.save(last_only=True)
                    last_save = time.time()
                if stop is not None and stop.signum is not None:
                    self.save(last_only=True)
                    bar.close()
                    raise TrainingStopped(stop.signum, self.step)
                if self.memory_restart is not None and self.step < total:  # last.pt was just written
                    bar.close()
                    raise RestartForMemory(self.step, *self.memory_restart)
            else:
                self.epoch, self.batch_in_epoch = self.epoch + 1, 0
        if self.validated_step != self.step:  # the same answer on every rank: all of them reach the barrier
            self._checkpoint(running)
        bar.close()

    def _checkpoint(self, train_loss: float) -> None:
        """Validation and checkpoint by rank 0; the other ranks wait at the barrier until the files are whole."""
        if self.rank == 0:
            record = self.validate(train_loss)
            tqdm.write(json.dumps(record))
        self.save()
        self.validated_step = self.step
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
        sources, references = self.bleu_sample()  # the same sentences and score as every validation
        for name, path in candidates.items():
            model, _ = load_release(path)
            result, hyps = evaluate(model, self.tokenizer, sources, references, 1)
            scores[name] = validation_bleu(result, sources, references, hyps)[0]
        chosen = max(scores, key=scores.get)
        model, _ = load_release(candidates[chosen])
        summary = {
            "chosen": chosen,
            "valid_bleu_greedy": scores,
            "steps": self.step,
            "epochs": self.epoch,
            "parameters": model.num_parameters(),
            "train_seconds": round(self.train_seconds, 1),
        }
        release = self.out / "release"
        save_release(release, model, {"run": self.run.to_dict(), "training": summary})
        (release / TOKENIZER_FILE).write_bytes((self.out / TOKENIZER_FILE).read_bytes())
        prepared = self.data_dir / "prepare.json" if self.data_dir else None
        if prepared and prepared.exists():  # how the data was made, normalisation included: export reads it
            (release / "prepare.json").write_bytes(prepared.read_bytes())
        return summary


def _validation_span(history: list[dict[str, Any]]) -> float | None:
    """Seconds between the first and the last validation record; None with fewer than two."""
    if len(history) < 2:
        return None
    return history[-1]["time"] - history[0]["time"]


def validation_bleu(
    result: dict[str, Any], sources: Sequence[str], references: Sequence[str], hyps: Sequence[str]
) -> tuple[float, dict[str, float]]:
    """A run's validation BLEU and its directions': the corpus BLEU of ``evaluate``'s result; for tagged
    (multi-direction) lines, the mean of the directions' BLEU, each with its target's tokenizer."""
    by_direction = bleu_by_direction(sources, references, hyps)
    if not by_direction:
        return result["bleu"], {}
    return round(sum(by_direction.values()) / len(by_direction), 2), by_direction


def bleu_by_direction(sources: Sequence[str], references: Sequence[str], hyps: Sequence[str]) -> dict[str, float]:
    """BLEU of each direction of tagged validation lines (model/directions.py), with the target's own tokenizer;
    {} when the lines have no tags."""
    groups: dict[str, list[int]] = {}
    for i, source in enumerate(sources):
        direction = direction_of_line(source)
        if direction is not None:
            groups.setdefault(direction, []).append(i)
    scores = {}
    for direction, rows in sorted(groups.items()):
        result = bleu([hyps[i] for i in rows], [references[i] for i in rows], bleu_tokenizer(direction))
        scores[direction] = float(result["bleu"])  # type: ignore[arg-type]
    return scores
