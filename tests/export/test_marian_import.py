"""``python -m export.cli import-hf``: random Hugging Face Marian checkpoints built here (no download), imported as
bundles, served by our engine: tokens, greedy translations, scores and attention against ``transformers``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from marian_checkpoint import SOURCE_WORDS, TARGET_WORDS, sentences, write_checkpoint

from core.bundle import load_bundle
from core.tokenizer import BOS_ID, EOS_ID
from engine import Engine
from engine.decoding import TranslateOptions
from export.cli import main
from export.marian import SOURCE, ImportRefused, banned_ids, model_config

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

# every configuration the importer accepts, in small: OPUS-MT's (swish, scaled embeddings, tied), MarianConfig's
# defaults (GELU, unscaled, an untied output layer), ReLU; source pieces vocab.json lacks (Marian's <unk>). The EOS
# biases were chosen so that some translations end with EOS and others at max_length (both asserted)
CONFIGS = {
    "opus-mt": dict(drop_source_pieces=3, eos_bias=3.5),
    "gelu-untied": dict(activation_function="gelu", scale_embedding=False, tie_word_embeddings=False, eos_bias=6.0),
    "relu": dict(activation_function="relu", encoder_layers=1, decoder_layers=3, eos_bias=4.5),
}
N_SENTENCES = 100
MAX_LENGTH = 40  # generate's max_length: the start token and 39 generated tokens
# per generated token: a score sums float32 log-probabilities that differ from transformers' by up to 6e-6 each
# (different operation orders in fp32), so a 39-token score differs by up to 2.3e-4 (seen)
SCORE_TOLERANCE = 1e-5


class Imported:
    def __init__(self, checkpoint: Path, bundle: Path) -> None:
        self.checkpoint, self.bundle = checkpoint, bundle
        self.hf = transformers.MarianMTModel.from_pretrained(checkpoint, attn_implementation="eager").eval()
        self.tokenizer = transformers.MarianTokenizer.from_pretrained(checkpoint)
        self.engine = Engine(load_bundle(bundle), variant="fp32")
        vocabulary = self.engine.bundle.manifest["imported"]["vocabulary"]
        self.marian_ids = vocabulary["marian_ids"]  # our id -> Marian's
        self.texts = sentences(SOURCE_WORDS + ["Zürich", "Öl", "?"], N_SENTENCES, seed=11)

    def marian(self, ids: list[int]) -> list[int]:
        return [self.marian_ids[i] for i in ids]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def imported(request, tmp_path_factory) -> Imported:
    root = tmp_path_factory.mktemp(request.param)
    checkpoint = write_checkpoint(root / "checkpoint", **CONFIGS[request.param])
    repository = root / "repository"
    args = ["import-hf", "--from", str(checkpoint), "--name", "marian", "--version", "1"]
    assert main([*args, "--repository", str(repository)]) == 0
    return Imported(checkpoint, repository / "marian" / "1")


def test_manifest_records_the_import(imported):
    manifest = load_bundle(imported.bundle).manifest
    config = json.loads((imported.checkpoint / "config.json").read_text())
    assert manifest["source"] == SOURCE
    assert manifest["imported"]["from"] == str(imported.checkpoint)
    assert manifest["imported"]["config"]["d_model"] == config["d_model"]
    assert manifest["imported"]["generation"]["bad_words_ids"] == [[config["pad_token_id"]]]
    assert max(manifest["imported"]["parity"]["max_abs_diff"].values()) <= 1e-4
    assert (manifest["source_language"], manifest["target_language"]) == ("de", "en")
    assert manifest["model"]["banned_ids"] == [BOS_ID]  # Marian's pad, our decoder start


def test_source_ids_are_marians(imported):
    ours = imported.engine.source_ids(imported.texts)
    theirs = imported.tokenizer(imported.texts).input_ids
    assert [imported.marian(ids) for ids in ours] == theirs
    assert any(1 in ids for ids in theirs), "no <unk> among the sources: the test would not see unknown pieces"


def test_target_text_is_cut_as_target_spm_cuts_it(imported):
    """Glossary terms and given targets: the bundle's target tokenizer gives MarianTokenizer's target ids."""
    targets = sentences(TARGET_WORDS + ["Zürich", "Hund"], N_SENTENCES, seed=12)
    ours = [imported.marian(imported.engine.target_tokenizer.encode(t)) for t in targets]
    theirs = [ids[:-1] for ids in imported.tokenizer(text_target=targets).input_ids]  # EOS left out
    assert ours == theirs
    assert ours != [imported.marian(imported.engine.tokenizer.encode(t)) for t in targets]  # not the source cut
    assert imported.engine.bundle.manifest["tokenizer"]["target_file"] in imported.engine.bundle.manifest["files"]


def _generate(imported: Imported, text: str, **kwargs):
    inputs = imported.tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        return imported.hf.generate(**inputs, max_length=MAX_LENGTH, forced_eos_token_id=None, **kwargs)[0].tolist()


def _log_probs(imported: Imported, text: str, decoder_input: list[int]):
    """transformers' log-softmax at each step of a given decoder input (Marian ids), and its attention."""
    inputs = imported.tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        out = imported.hf(**inputs, decoder_input_ids=torch.tensor([decoder_input]), output_attentions=True)
    return torch.log_softmax(out.logits[0].float(), dim=-1), out


def test_greedy_translations_are_generates(imported):
    """Greedy tokens equal generate's (bad_words_ids as the checkpoint sets them) on every sentence; the score is the
    sum of transformers' log-probabilities of the generated tokens, EOS included when generated, within
    SCORE_TOLERANCE per token."""
    ours = imported.engine.translate(imported.texts, TranslateOptions(beam_size=1, max_length=MAX_LENGTH - 1))
    ended = 0
    for text, translation in zip(imported.texts, ours, strict=True):
        theirs = _generate(imported, text, num_beams=1, do_sample=False)
        assert theirs[0] == imported.hf.config.decoder_start_token_id
        generated = theirs[1:]
        with_eos = generated[-1] == imported.hf.config.eos_token_id
        ended += with_eos
        assert imported.marian(translation.token_ids) == (generated[:-1] if with_eos else generated), text
        # MarianTokenizer.decode strips the text: a random model's lone "▁" pieces leave spaces at its ends
        assert translation.text.strip() == imported.tokenizer.decode(generated, skip_special_tokens=True), text
        log_probs, _ = _log_probs(imported, text, theirs[:-1])  # row i predicts generated[i]
        reference = sum(float(log_probs[i, token]) for i, token in enumerate(generated))
        assert translation.score == pytest.approx(reference, abs=SCORE_TOLERANCE * len(generated)), text
    assert 0 < ended < len(ours), f"{ended} of {len(ours)} translations ended with EOS: the test needs both kinds"


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_beam_translations_are_generates(imported, alpha):
    """Beam 4, four hypotheses each: the same tokens and order as generate's num_beams=4, num_return_sequences=4 on
    every sentence (the first 40 with a length penalty), scores (sums of log-probabilities) within SCORE_TOLERANCE per
    token. Our beam takes the 2 * beam best candidates, ends a hypothesis on EOS among the first beam of them and stops
    a sentence once beam hypotheses ended: generate with early_stopping=True. An imported bundle ranks by generate's
    length penalty n ** a (its manifest's decoding.length_penalty_form "hf"), not GNMT's ((5 + n) / 6) ** a."""
    assert imported.engine.decoding["length_penalty_form"] == "hf"
    options = TranslateOptions(beam_size=4, num_hypotheses=4, length_penalty=alpha, max_length=MAX_LENGTH - 1)
    texts = imported.texts if alpha == 0 else imported.texts[:40]
    ours = imported.engine.translate(texts, options)
    pad, eos = imported.hf.config.pad_token_id, imported.hf.config.eos_token_id
    ended = 0
    for text, translation in zip(texts, ours, strict=True):
        inputs = imported.tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            out = imported.hf.generate(
                **inputs,
                num_beams=4,
                num_return_sequences=4,
                length_penalty=alpha,
                early_stopping=True,
                max_length=MAX_LENGTH,
                forced_eos_token_id=None,
                output_scores=True,
                return_dict_in_generate=True,
            )
        theirs, lengths = [], []
        for sequence in out.sequences.tolist():
            generated = [t for t in sequence[1:] if t != pad]  # shorter hypotheses are padded
            ended += generated[-1:] == [eos]
            theirs.append(generated[:-1] if generated[-1:] == [eos] else generated)
            lengths.append(len(generated))  # EOS counted, as both penalties count it
        assert [imported.marian(ids) for _, _, ids in translation.hypotheses] == theirs, text
        for (_, score, ids), reference, n in zip(
            translation.hypotheses, out.sequences_scores.tolist(), lengths, strict=True
        ):  # generate's sequence score is divided by n ** alpha; ours is the sum
            assert score == pytest.approx(reference * n**alpha, abs=SCORE_TOLERANCE * (len(ids) + 1) * n**alpha), text
    assert 0 < ended < 4 * len(ours), f"{ended} hypotheses ended with EOS: the test needs both kinds"


def test_attention_is_output_attentions(imported):
    """/v1/attention's maps (the engine's attention_ids) equal transformers' output_attentions for the same source and
    target: encoder self-attention, decoder self-attention and cross-attention, every layer and head."""
    for text in imported.texts[:10]:
        result = imported.engine.attention(text)
        target = result["target_ids"]
        decoder_input = imported.marian([BOS_ID, *target])
        _, out = _log_probs(imported, text, decoder_input)
        for ours, theirs in (
            ("encoder", out.encoder_attentions),
            ("decoder", out.decoder_attentions),
            ("cross", out.cross_attentions),
        ):
            expected = torch.stack(theirs)[:, 0].numpy()  # (layers, heads, rows, keys)
            np.testing.assert_allclose(np.asarray(result[ours]), expected, atol=1e-5, err_msg=f"{text}: {ours}")
        assert result["source_tokens"][-1] == "</s>" and result["target_tokens"][0] == "<s>"
        assert EOS_ID not in target


def test_int8_variant_is_calibrated_on_source_sentences(tmp_path):
    """--variants fp32 int8: statically quantized graphs calibrated on the given sentences. The int8 graphs score fp32's
    greedy translations within 0.3 nats per token on average (0.13 measured, on VNNI and on AVX2-only CPUs alike since
    the weights take 7 bits: with 8, onnxruntime's saturating u8 x s8 products on AVX2 made it 0.61; a random model's
    activations are large; graphs that compute something else differ by several nats)."""
    checkpoint = write_checkpoint(tmp_path / "checkpoint", drop_source_pieces=3, eos_bias=3.5)
    calibration = tmp_path / "calibration.de"
    calibration.write_text("\n".join(sentences(SOURCE_WORDS, 200, seed=3)) + "\n")
    args = ["import-hf", "--from", str(checkpoint), "--name", "marian", "--version", "2"]
    args += ["--repository", str(tmp_path / "repository"), "--variants", "fp32", "int8"]
    assert main([*args, "--calibration-data", str(calibration)]) == 0
    bundle = load_bundle(tmp_path / "repository" / "marian" / "2")
    assert bundle.manifest["variants"]["int8"]["quantization"]["method"] == "static"
    assert "7 bits" in bundle.manifest["variants"]["int8"]["quantization"]["weights"]
    fp32, int8 = Engine(bundle, variant="fp32"), Engine(bundle, variant="int8")
    texts = sentences(SOURCE_WORDS, 50, seed=11)
    translations = fp32.translate(texts, TranslateOptions(beam_size=1, max_length=MAX_LENGTH - 1))
    differences = []
    for source, translation in zip(fp32.source_ids(texts), translations, strict=True):
        score = int8.attention_ids(source, translation.token_ids)["score"]
        differences.append(abs(score - translation.score) / (len(translation.token_ids) + 1))
    assert np.mean(differences) < 0.3


OPUS_CONFIG = {
    "model_type": "marian",
    "vocab_size": 100,
    "d_model": 16,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "max_position_embeddings": 32,
    "activation_function": "swish",
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"activation_function": "gelu_new"}, "activation_function"),
        ({"decoder_attention_heads": 4}, "decoder_attention_heads"),
        ({"decoder_ffn_dim": 64}, "decoder_ffn_dim"),
        ({"share_encoder_decoder_embeddings": False}, "separate vocabularies"),
        ({"model_type": "bart"}, "model_type"),
    ],
)
def test_what_the_import_cannot_compute_exactly_is_refused(change, message):
    with pytest.raises(ImportRefused, match=message):
        model_config({**OPUS_CONFIG, **change}, vocab_size=101, banned_ids=[])
    assert model_config(OPUS_CONFIG, vocab_size=101, banned_ids=[1]).activation == "swish"


def test_bad_words_of_several_tokens_are_refused():
    assert banned_ids({"bad_words_ids": [[99]]}, {99: 1}) == [1]
    with pytest.raises(ImportRefused, match="single tokens"):
        banned_ids({"bad_words_ids": [[5, 6]]}, {5: 7, 6: 8})


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: (d / "vocab.json").unlink(), "no vocab.json"),
        (lambda d: (d / "tokenizer_config.json").write_text('{"separate_vocabs": true}'), "separate vocabularies"),
        (lambda d: _add_piece(d, ">>fra<<"), "multilingual"),
        (lambda d: _add_piece(d, "<s>"), "<s> piece"),
    ],
)
def test_cli_refuses_with_a_message(tmp_path, capsys, edit, message):
    checkpoint = write_checkpoint(tmp_path / "checkpoint")
    edit(checkpoint)
    args = ["import-hf", "--from", str(checkpoint), "--name", "m", "--version", "1"]
    assert main([*args, "--repository", str(tmp_path / "repository")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "repository").exists()


def _add_piece(checkpoint: Path, piece: str) -> None:
    """vocab.json with one more piece (and config.json's vocab_size to match)."""
    vocab = json.loads((checkpoint / "vocab.json").read_text())
    vocab[piece] = len(vocab)
    (checkpoint / "vocab.json").write_text(json.dumps(vocab))
    config = json.loads((checkpoint / "config.json").read_text())
    config["vocab_size"] = len(vocab)
    (checkpoint / "config.json").write_text(json.dumps(config))


def test_pytorch_weights_file_imports_as_safetensors_does(tmp_path):
    """pytorch_model.bin (read with weights_only=True) gives the same weights as model.safetensors."""
    from safetensors.torch import load_file

    from export.marian import import_marian

    checkpoint = write_checkpoint(tmp_path / "safetensors")
    other = Path(shutil.copytree(checkpoint, tmp_path / "pytorch"))
    torch.save(load_file(str(other / "model.safetensors")), other / "pytorch_model.bin")
    (other / "model.safetensors").unlink()
    from_bin, from_safetensors = import_marian(other).model.state_dict(), import_marian(checkpoint).model.state_dict()
    assert list(from_bin) == list(from_safetensors)
    for name, tensor in from_bin.items():
        assert torch.equal(tensor, from_safetensors[name]), name


def test_the_checkpoints_num_beams_and_max_length_are_the_bundles_defaults(imported):
    """generate's defaults come from the checkpoint (num_beams 4, max_length 40 here): a request that leaves beam and
    length out gets them too, so it decodes as generate does without arguments (length_penalty 0: see above)."""
    manifest = load_bundle(imported.bundle).manifest
    assert manifest["decoding"]["beam_size"] == 4 and manifest["decoding"]["max_length"] == MAX_LENGTH - 1
    resolved = imported.engine.resolved(TranslateOptions(beam_size=None, length_penalty=0.0))
    assert (resolved.beam_size, resolved.max_length) == (4, MAX_LENGTH - 1)
    assert imported.engine.resolved(TranslateOptions(beam_size=None, num_hypotheses=6)).beam_size == 6
    texts = imported.texts[:20]
    ours = imported.engine.translate(texts, TranslateOptions(beam_size=None, length_penalty=0.0))
    for text, translation in zip(texts, ours, strict=True):
        inputs = imported.tokenizer([text], return_tensors="pt")
        with torch.no_grad():  # no num_beams, no max_length: the checkpoint's
            sequence = imported.hf.generate(**inputs, length_penalty=0.0, early_stopping=True, forced_eos_token_id=None)
        generated = [t for t in sequence[0].tolist()[1:] if t != imported.hf.config.pad_token_id]
        if generated[-1:] == [imported.hf.config.eos_token_id]:
            generated = generated[:-1]
        assert imported.marian(translation.token_ids) == generated, text


def _generated_beams(imported: Imported, text: str, alpha: float) -> list[list[int]]:
    """generate's four beam hypotheses (Marian ids, EOS left out), best first."""
    inputs = imported.tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        sequences = imported.hf.generate(
            **inputs,
            num_beams=4,
            num_return_sequences=4,
            length_penalty=alpha,
            early_stopping=True,
            max_length=MAX_LENGTH,
            forced_eos_token_id=None,
        ).tolist()
    pad, eos = imported.hf.config.pad_token_id, imported.hf.config.eos_token_id
    out = [[t for t in sequence[1:] if t != pad] for sequence in sequences]
    return [ids[:-1] if ids[-1:] == [eos] else ids for ids in out]


def test_every_search_path_ranks_by_generates_penalty(imported):
    """Length penalty 1.0 through each search that ranks finished hypotheses: the search loop graph (a lone sentence),
    the step-by-step numpy beam (a batch, the loop off) and the live decode (continuous batching): generate's
    hypotheses in generate's order on each."""
    from engine.live import LiveBatch, supports_live

    options = TranslateOptions(beam_size=4, num_hypotheses=4, length_penalty=1.0, max_length=MAX_LENGTH - 1)
    texts = imported.texts[:12]
    theirs = [_generated_beams(imported, text, 1.0) for text in texts]
    engine = imported.engine
    assert engine.search_loop is not None  # the imported bundle has the loop graph: a lone sentence runs in it
    paths = {
        "search loop": [engine.translate([text], options)[0] for text in texts],
        "numpy beam": Engine(load_bundle(imported.bundle), variant="fp32", search_loop=False).translate(texts, options),
    }
    assert supports_live(engine)
    live, results = LiveBatch(engine), {}
    done, _ = live.add([(i, engine.source_ids([text])[0], options, False) for i, text in enumerate(texts)])
    results.update(done)
    while len(live):
        results.update(live.step().finished)
    paths["live"] = [results[i] for i in range(len(texts))]
    for name, translations in paths.items():
        for text, translation, want in zip(texts, translations, theirs, strict=True):
            assert [imported.marian(ids) for _, _, ids in translation.hypotheses] == want, (name, text)
