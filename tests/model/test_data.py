"""Corpus reading, encoding and token-budget batching."""

from __future__ import annotations

import random

import pytest

from model.data import Batch, Example, encode_pairs, make_batches, pad, read_parallel
from model.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_tokenizer


def _examples(n: int = 200, seed: int = 0) -> list[Example]:
    rng = random.Random(seed)
    return [
        Example([4] * rng.randint(1, 12) + [EOS_ID], [BOS_ID] + [5] * rng.randint(1, 14) + [EOS_ID]) for _ in range(n)
    ]


def _width(examples: list[Example], batch: list[int]) -> int:
    return max(max(len(examples[i].src), len(examples[i].tgt)) for i in batch)


@pytest.mark.parametrize("max_tokens", [16, 50, 200])
@pytest.mark.parametrize("seed", [None, 3])
def test_batches_respect_max_tokens_and_cover_every_example_once(max_tokens, seed):
    examples = _examples()
    batches = make_batches(examples, max_tokens, seed=seed)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(len(examples)))
    for batch in batches:
        assert batch
        assert _width(examples, batch) * len(batch) <= max_tokens  # padded tokens of the batch
    if max_tokens >= 50:
        assert sum(len(b) for b in batches) / len(batches) > 2  # batches are filled, not singletons


def test_batches_group_similar_lengths():
    examples = _examples()
    for batch in make_batches(examples, 100, seed=1):
        lengths = [len(examples[i].src) for i in batch]
        assert max(lengths) - min(lengths) <= 1


def test_batches_are_deterministic_for_a_seed_and_differ_between_seeds():
    examples = _examples()
    assert make_batches(examples, 60, seed=5) == make_batches(examples, 60, seed=5)
    assert make_batches(examples, 60, seed=5) != make_batches(examples, 60, seed=6)
    assert make_batches(examples, 60) == make_batches(examples, 60)


def test_batch_from_examples_shifts_the_target():
    batch = Batch.from_examples(
        [Example([7, 8, EOS_ID], [BOS_ID, 9, EOS_ID]), Example([7, EOS_ID], [BOS_ID, 9, 10, EOS_ID])]
    )
    assert batch.src.tolist() == [[7, 8, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 9, EOS_ID], [BOS_ID, 9, 10]]
    assert batch.tgt_out.tolist() == [[9, EOS_ID, PAD_ID], [9, 10, EOS_ID]]
    assert batch.n_tokens == 5
    assert pad([[1], [1, 2, 3]]).tolist() == [[1, 0, 0], [1, 2, 3]]


def test_read_and_encode_a_parallel_corpus(corpus_dir, tmp_path):
    src, tgt = read_parallel(corpus_dir, "train", "de", "en")
    assert len(src) == len(tgt) > 100
    tok = Tokenizer(train_tokenizer(src + tgt, tmp_path / "t.model", 300))
    examples = encode_pairs(tok, src + [""], tgt + ["x"])  # the empty pair is dropped
    assert len(examples) == len(src)
    first = examples[0]
    assert first.src == tok.encode(src[0]) + [EOS_ID]
    assert first.tgt == [BOS_ID] + tok.encode(tgt[0]) + [EOS_ID]
    short = encode_pairs(tok, src, tgt, max_length=5)
    assert 0 < len(short) < len(src)
    assert all(len(e.src) <= 6 and len(e.tgt) <= 7 for e in short)

    (tmp_path / "bad.de").write_text("a\nb\n")
    (tmp_path / "bad.en").write_text("a\n")
    with pytest.raises(ValueError, match="lines"):
        read_parallel(tmp_path, "bad", "de", "en")
    with pytest.raises(FileNotFoundError):
        read_parallel(tmp_path, "missing", "de", "en")


def test_iter_lines_reads_the_lines_read_lines_does(tmp_path):
    from model.data import iter_lines, read_lines

    for i, text in enumerate(["", "a", "a\n", "a\n\n", "x\u2028y\nz\x1cw\x85v\r\nq\rr\n", "tail\nno newline"]):
        path = tmp_path / f"{i}.txt"
        path.write_bytes(text.encode("utf-8"))
        assert list(iter_lines(path)) == read_lines(path), repr(text)


def test_in_memory_batches_are_make_batches_of_the_epoch_seed():
    from model.data import ExampleBatches

    examples = _examples()
    source = ExampleBatches(examples, 60, seed=5)
    for epoch in (0, 1):
        order = make_batches(examples, 60, seed=5 + epoch)
        assert source.epoch_size(epoch) == len(order) and list(source.epoch_order(epoch)) == order
        assert list(source.epoch_order(epoch, 3)) == order[3:]
    assert source.batch(order[0]).src.shape[0] == len(order[0])
