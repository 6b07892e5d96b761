"""``python -m export.cli import-argos``: Argos packages built here (a random Marian checkpoint converted by
CTranslate2's own converter, fp32 and int8, zipped with a SentencePiece model trained in the test; no download),
imported as bundles and translated by our engine: greedy tokens against ``ctranslate2.Translator`` on the pieces Argos
feeds it. CTranslate2 runs with min_decoding_length 0 (its default, 1, never ends a translation at once; our engine
may), so the two compute the same search."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from argos_package import METADATA, README, convert, write_package
from marian_checkpoint import SOURCE_WORDS, sentences, write_checkpoint

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from export.argos import SOURCE, import_argos
from export.cli import main
from export.ctranslate2_model import ModelFormatError, read_model
from export.marian import ImportRefused

ctranslate2 = pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")

N_SENTENCES = 100
MAX_LENGTH = 30  # generated tokens, EOS counted (CTranslate2's max_decoding_length)


class Package:
    def __init__(self, root: Path, checkpoint: Path, quantization: str, version: int, *extra: str) -> None:
        self.ct2 = convert(checkpoint, root / f"ct2-{quantization}-{version}", quantization)
        self.path = write_package(checkpoint, self.ct2, root / f"{quantization}-{version}.argosmodel")
        repository = root / "repository"
        args = ["import-argos", "--from", str(self.path), "--name", "argos", "--version", str(version), *extra]
        assert main([*args, "--repository", str(repository)]) == 0
        self.bundle = load_bundle(repository / "argos" / str(version))
        self.engine = Engine(self.bundle, variant="fp32")
        self.vocabulary = json.loads((self.ct2 / "shared_vocabulary.json").read_text(encoding="utf-8"))
        self.rows = self.bundle.manifest["imported"]["vocabulary"]["rows"]  # our id -> CTranslate2's
        self.sp = spm.SentencePieceProcessor(model_file=str(checkpoint / "source.spm"))

    def ours(self, texts: list[str], max_length: int = MAX_LENGTH) -> list[list[str]]:
        """Our greedy translations as CTranslate2 tokens."""
        options = TranslateOptions(beam_size=1, max_length=max_length)
        return [[self.vocabulary[self.rows[i]] for i in t.token_ids] for t in self.engine.translate(texts, options)]

    def theirs(self, texts: list[str], compute_type: str, eos: bool = False) -> list[list[str]]:
        """CTranslate2's greedy translations of the pieces Argos passes it (``eos``: with ``</s>`` appended)."""
        translator = ctranslate2.Translator(str(self.ct2), compute_type=compute_type, intra_threads=1)
        pieces = [self.sp.encode(t, out_type=str) + (["</s>"] if eos else []) for t in texts]
        results = translator.translate_batch(pieces, beam_size=1, max_decoding_length=MAX_LENGTH, min_decoding_length=0)
        return [r.hypotheses[0] for r in results]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    # a joint SentencePiece model (an Argos package has one), 3 of its pieces missing from the vocabulary (<unk> in
    # CTranslate2); the EOS bias makes some translations end before MAX_LENGTH and others not (both asserted)
    root = tmp_path_factory.mktemp("argos-checkpoint")
    return write_checkpoint(root / "checkpoint", joint=True, drop_source_pieces=3, eos_bias=3.5)


@pytest.fixture(scope="module")
def fp32(checkpoint) -> Package:
    return Package(checkpoint.parent, checkpoint, "float32", 1)


@pytest.fixture(scope="module")
def int8(checkpoint) -> Package:
    return Package(checkpoint.parent, checkpoint, "int8", 2)


TEXTS = sentences(SOURCE_WORDS + ["Zürich", "Öl", "?"], N_SENTENCES, seed=11)


def test_manifest_records_the_package(fp32):
    manifest = fp32.bundle.manifest
    imported = manifest["imported"]
    assert manifest["source"] == SOURCE == "imported: argos ctranslate2"
    assert (manifest["source_language"], manifest["target_language"]) == ("de", "en")
    assert imported["package"] == METADATA
    assert imported["licence"] == {"README.md": README}
    assert not [f for f in imported["files"] if f.startswith("stanza/")]
    assert imported["ctranslate2"]["spec"] == "TransformerSpec" and imported["ctranslate2"]["quantization"] == "float32"
    assert imported["ctranslate2"]["config"]["add_source_eos"] is False
    assert manifest["model"]["source_eos"] is False and imported["source_eos"] is False
    assert manifest["decoding"]["length_penalty"] == 0.2 and manifest["decoding"]["beam_size"] == 4
    assert max(imported["parity"]["max_abs_diff"].values()) <= 1e-4


def test_greedy_fp32_equals_ctranslate2(fp32):
    """Every one of 100 sentences: our greedy tokens are CTranslate2's (fp32), some ending with EOS, some at the
    length limit; sources as Argos feeds them (SentencePiece pieces, no </s>: our bundle masks its EOS)."""
    ours, theirs = fp32.ours(TEXTS), fp32.theirs(TEXTS, "float32")
    differing = [(t, a, b) for t, a, b in zip(TEXTS, ours, theirs, strict=True) if a != b]
    assert not differing, f"{len(differing)} of {len(TEXTS)} differ, e.g. {differing[0]}"
    ended = sum(len(t) < MAX_LENGTH for t in theirs)
    assert 0 < ended < len(TEXTS), f"{ended} translations ended before the limit: the test needs both kinds"
    unknown = [p for t in TEXTS for p in fp32.sp.encode(t, out_type=str) if p not in fp32.vocabulary]
    assert unknown, "no source piece outside the vocabulary (<unk> in CTranslate2): the test would not see aliases"


@pytest.mark.parametrize("alpha", [0.0, 0.2, 1.0])
def test_beam_equals_ctranslate2(fp32, alpha):
    """Beam 4, the best hypothesis: CTranslate2's on every sentence, at Argos's length penalty (0.2, the bundle's
    default) and two others (both rank by score / length ** penalty: the bundle's length_penalty_form "hf")."""
    options = TranslateOptions(beam_size=4, max_length=MAX_LENGTH, length_penalty=alpha)
    ours = [[fp32.vocabulary[fp32.rows[i]] for i in t.token_ids] for t in fp32.engine.translate(TEXTS, options)]
    translator = ctranslate2.Translator(str(fp32.ct2), compute_type="float32", intra_threads=1)
    pieces = [fp32.sp.encode(t, out_type=str) for t in TEXTS]
    results = translator.translate_batch(
        pieces, beam_size=4, length_penalty=alpha, max_decoding_length=MAX_LENGTH, min_decoding_length=0
    )
    assert ours == [r.hypotheses[0] for r in results]


def test_source_eos_changes_the_translation(fp32):
    """The EOS option is not a no-op: CTranslate2 given </s> translates some sentences otherwise (6 of 100 here), and
    ours with the EOS masked gives the translations without it (so the masking is what makes the tokens equal)."""
    with_eos, without = fp32.theirs(TEXTS, "float32", eos=True), fp32.theirs(TEXTS, "float32")
    differing = [i for i, (a, b) in enumerate(zip(with_eos, without, strict=True)) if a != b]
    assert differing
    ours = fp32.ours([TEXTS[i] for i in differing])
    assert ours == [without[i] for i in differing] != [with_eos[i] for i in differing]


def test_an_empty_text_stays_finite(fp32):
    """A source of EOS alone (an empty text), all masked in such a bundle: /v1/attention of it stays finite (exact
    zero probabilities, no NaN of a softmax over nothing), and it translates to an empty text."""
    result = fp32.engine.attention("")
    assert result["source_tokens"] == ["</s>"]
    assert np.isfinite(np.asarray(result["encoder"])).all() and np.isfinite(np.asarray(result["cross"])).all()
    assert fp32.engine.translate([""])[0].text == ""


def test_source_eos_option(checkpoint):
    """--source-eos: the encoder reads the EOS, as CTranslate2 given pieces + </s>."""
    package = Package(checkpoint.parent, checkpoint, "float32", 3, "--source-eos")
    texts = TEXTS[:30]
    assert package.bundle.manifest["model"]["source_eos"] is True
    assert package.ours(texts) == package.theirs(texts, "float32", eos=True)


def test_int8_package_is_dequantized_exactly(int8, capsys):
    """An int8 package's weights, de-quantized (q / scale per row), are CTranslate2's own de-quantization: our fp32
    graphs give the tokens CTranslate2 gives with compute_type float32 on every sentence. CTranslate2's int8 kernels
    (activations quantized too) are another computation: their agreement is printed, not asserted."""
    assert int8.bundle.manifest["imported"]["ctranslate2"]["quantization"] == "int8"
    ours = int8.ours(TEXTS)
    assert ours == int8.theirs(TEXTS, "float32")
    agreement = sum(a == b for a, b in zip(ours, int8.theirs(TEXTS, "int8"), strict=True))
    with capsys.disabled():
        print(f"\nint8 package: our de-quantized fp32 vs CTranslate2 int8 greedy: {agreement}/{len(TEXTS)} identical")


def _serialize(variables: dict[str, np.ndarray], version: int, aliases: dict[str, str] | None = None) -> bytes:
    """A model.bin as CTranslate2 writes it (model_spec.py _serialize), versions 2-6."""

    def string(s: str) -> bytes:
        return struct.pack("<H", len(s) + 1) + s.encode() + b"\0"

    out = struct.pack("<I", version) + string("TransformerSpec") + struct.pack("<I", 7)
    out += struct.pack("<I", len(variables))
    for name, value in variables.items():
        out += string(name) + struct.pack("<B", value.ndim) + struct.pack(f"<{value.ndim}I", *value.shape)
        if version >= 4:
            type_id = ("float32", "int8", "int16", "int32", "float16").index(str(value.dtype))
            out += struct.pack("<BI", type_id, value.nbytes)
        else:
            out += struct.pack("<BI", value.itemsize, value.size)
        out += value.tobytes()
    if version >= 3:
        out += struct.pack("<I", len(aliases or {}))
        out += b"".join(string(a) + string(t) for a, t in (aliases or {}).items())
    return out


@pytest.mark.parametrize("version", [2, 3, 4, 6])
def test_reader_reads_every_binary_version(version):
    weight = np.array([[10, -127], [64, 0]], dtype=np.int8)
    variables = {"a/weight": weight, "a/weight_scale": np.array([10.0, 64.0], np.float32), "a/flag": np.int8(1)}
    model = read_model(_serialize({k: np.asarray(v) for k, v in variables.items()}, version, {"b/weight": "a/weight"}))
    np.testing.assert_array_equal(model.weight("a/weight"), np.array([[1.0, -12.7], [1.0, 0.0]], np.float32))
    assert model.attribute("a/flag") == 1
    if version >= 3:
        np.testing.assert_array_equal(model.weight("b/weight"), model.weight("a/weight"))


def test_reader_refuses_a_truncated_file(fp32):
    data = (fp32.ct2 / "model.bin").read_bytes()
    with pytest.raises(ModelFormatError, match="more expected"):
        read_model(data[: len(data) // 2])


def _repacked(package: Path, out: Path, edit) -> bytes:
    """The package with its model.bin's variables changed by ``edit``."""
    with zipfile.ZipFile(package) as archive:
        files = {n: archive.read(n) for n in archive.namelist()}
    name = next(n for n in files if n.endswith("model/model.bin"))
    model = read_model(files[name])
    variables = dict(model.variables)
    edit(variables)
    files[name] = _serialize(variables, 6, model.aliases)
    with zipfile.ZipFile(out, "w") as archive:
        for n, data in files.items():
            archive.writestr(n, data)
    return out.read_bytes()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda v: v.update({"encoder/layernorm_embedding/gamma": np.ones(4, np.float32)}), "does not map"),
        (lambda v: v.update({"encoder/activation": np.int8(1)}), "activation"),
        (lambda v: v.update({"decoder/num_heads": np.int16(2)}), "num_heads"),
    ],
)
def test_what_the_import_cannot_compute_exactly_is_refused(fp32, tmp_path, edit, message):
    with pytest.raises(ImportRefused, match=message):
        import_argos(_repacked(fp32.path, tmp_path / "edited.argosmodel", edit))


def test_cli_refuses_a_file_that_is_no_package(tmp_path, capsys):
    path = tmp_path / "x.argosmodel"
    path.write_bytes(b"not a zip")
    args = ["import-argos", "--from", str(path), "--name", "x", "--version", "1", "--repository", str(tmp_path)]
    assert main(args) == 2
    assert "not a zip" in capsys.readouterr().err


def test_a_text_vocabulary_reads_as_the_json_one(fp32, tmp_path):
    """shared_vocabulary.txt (one piece a line: older packages) gives the vocabulary shared_vocabulary.json gives."""
    with zipfile.ZipFile(fp32.path) as archive:
        files = {n: archive.read(n) for n in archive.namelist()}
    name = next(n for n in files if n.endswith("model/shared_vocabulary.json"))
    text = "".join(f"{piece}\n" for piece in json.loads(files.pop(name)))
    files[name.replace(".json", ".txt")] = text.encode("utf-8")
    path = tmp_path / "text-vocabulary.argosmodel"
    with zipfile.ZipFile(path, "w") as archive:
        for n, data in files.items():
            archive.writestr(n, data)
    imported = import_argos(path.read_bytes())
    assert imported.package.vocabulary == fp32.vocabulary
    assert imported.vocab.marian_ids == fp32.rows


def test_a_pre_norm_relu_package_scores_as_ctranslate2(tiny_model_dir, tmp_path):
    """The other family of packages (OpenNMT-py's: pre-norm, ReLU, a final LayerNorm per stack, <s> a token of its
    own as the decoder start, <pad> in the vocabulary, an interleaved position table): a random model of our own
    written by CTranslate2's spec API (bench/ct2_convert.py), random LayerNorm weights so a misplaced norm shows.
    Per-token log-probabilities of the imported model equal CTranslate2's score_batch (teacher forcing, sources
    without </s> as Argos feeds them)."""
    import shutil

    import torch

    from bench.ct2_convert import convert as convert_ours
    from core.tokenizer import BOS_ID, EOS_ID, PAD_ID
    from model.checkpoint import load_release, save_release
    from model.config import ModelConfig
    from model.transformer import Transformer

    tiny, _ = load_release(tiny_model_dir / "release")
    cfg = ModelConfig.from_dict({**tiny.cfg.to_dict(), "norm_placement": "pre", "activation": "relu"})
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    release = tmp_path / "pre-norm"
    save_release(release, model)
    shutil.copy(tiny_model_dir / "release" / "tokenizer.model", release / "tokenizer.model")
    ct2 = convert_ours(release, tmp_path / "ct2")
    package = tmp_path / "pre-norm.argosmodel"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("p/metadata.json", json.dumps(METADATA))
        archive.writestr("p/sentencepiece.model", (release / "tokenizer.model").read_bytes())
        for file in sorted(ct2.iterdir()):
            archive.writestr(f"p/model/{file.name}", file.read_bytes())
    imported = import_argos(package.read_bytes())
    ours = imported.model
    assert (ours.cfg.norm_placement, ours.cfg.activation, ours.cfg.source_eos) == ("pre", "relu", False)
    assert BOS_ID not in imported.vocab.excluded  # <s> is a token of its own
    assert PAD_ID not in imported.vocab.excluded and ours.cfg.banned_ids == [PAD_ID]  # <pad>: in CTranslate2's softmax
    sp = spm.SentencePieceProcessor(model_proto=imported.tokenizer_proto)
    pieces = imported.package.vocabulary
    translator = ctranslate2.Translator(str(ct2), compute_type="float32", intra_threads=1)
    for source, target in zip(TEXTS[:5], reversed(TEXTS[:5]), strict=True):
        src, tgt = sp.encode(source), sp.encode(target)[:8]
        theirs = translator.score_batch(
            [[pieces[imported.vocab.marian_ids[i]] for i in src]], [[pieces[imported.vocab.marian_ids[i]] for i in tgt]]
        )[0].log_probs
        with torch.no_grad():
            logits = ours(torch.tensor([[*src, EOS_ID]]), torch.tensor([[BOS_ID, *tgt]]))
        expected = torch.log_softmax(logits[0].float(), dim=-1)[range(len(tgt) + 1), [*tgt, EOS_ID]]
        np.testing.assert_allclose(theirs, expected.numpy(), atol=1e-4, err_msg=source)
    # and as a bundle: the engine's greedy tokens are CTranslate2's
    args = ["import-argos", "--from", str(package), "--name", "pre", "--version", "1", "--repository", str(tmp_path)]
    assert main(args) == 0
    engine = Engine(load_bundle(tmp_path / "pre" / "1"), variant="fp32")
    translations = engine.translate(TEXTS[:30], TranslateOptions(beam_size=1, max_length=MAX_LENGTH))
    rows = imported.vocab.marian_ids
    results = translator.translate_batch(
        [[pieces[rows[i]] for i in sp.encode(t)] for t in TEXTS[:30]],
        beam_size=1,
        max_decoding_length=MAX_LENGTH,
        min_decoding_length=0,
    )
    assert [[pieces[rows[i]] for i in t.token_ids] for t in translations] == [r.hypotheses[0] for r in results]
