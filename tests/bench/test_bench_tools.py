"""Benchmark helpers: FLOP counts against torch's own counter, the CTranslate2 conversion, the docs section writer."""

from __future__ import annotations

import pytest
import torch
from tiny_bundle import SAMPLE_SENTENCES

from bench.flops import decoder_step_macs, encoder_macs_per_token, translation_macs
from bench.harness import write_section
from model.checkpoint import load_release
from model.config import ModelConfig
from model.transformer import Transformer


def _counted_flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("activation", ["relu", "swiglu"])
def test_flop_formulas_match_torch_flop_counter(activation):
    cfg = ModelConfig(
        vocab_size=50, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=3, d_ff=48, activation=activation
    )
    model = Transformer(cfg).eval()
    src_len, position, batch = 7, 5, 3
    src = torch.randint(4, cfg.vocab_size, (batch, src_len))
    memory = model.encode(src).memory
    cross = model.cross_kv(memory)
    cache = [(torch.randn(batch, cfg.n_heads, position, cfg.d_head),) * 2 for _ in range(cfg.n_decoder_layers)]
    token = torch.randint(4, cfg.vocab_size, (batch, 1))
    step = _counted_flops(lambda: model.decode(token, cross, src != 0, cache))
    assert step == 2 * batch * decoder_step_macs(cfg.to_dict(), src_len, position)
    encoder = _counted_flops(lambda: model.cross_kv(model.encode(src).memory))
    assert encoder == 2 * batch * src_len * encoder_macs_per_token(cfg.to_dict(), src_len)
    total = translation_macs(cfg.to_dict(), src_len, out_len=2, beam=4)
    assert total == src_len * encoder_macs_per_token(cfg.to_dict(), src_len) + 4 * sum(
        decoder_step_macs(cfg.to_dict(), src_len, t) for t in range(3)
    )


def test_write_section_replaces_only_its_own_section(tmp_path):
    path = tmp_path / "benchmarks.md"
    service = "<!-- bench/serving.py: begin -->\n## Service\n\nservice table\n<!-- bench/serving.py: end -->\n"
    path.write_text("# Benchmarks\n\n" + service + "\nnotes after\n")
    write_section(path, "bench/engine.py", "## Engine\n\nfirst\n")
    write_section(path, "bench/engine.py", "## Engine\n\nsecond\n")
    text = path.read_text()
    assert service in text and "notes after" in text and "second" in text and "first" not in text
    assert text.count("<!-- bench/engine.py: begin -->") == 1 and text.index("## Service") < text.index("## Engine")


def test_ct2_conversion_runs_our_model_and_the_check_notices_a_wrong_one(tiny_model_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    from ctranslate2.specs import model_spec

    from bench.ct2_convert import build_spec, check_agreement, convert

    release = tiny_model_dir / "release"
    out = convert(release, tmp_path / "ct2")
    report = check_agreement(release, out, SAMPLE_SENTENCES * 4)
    assert report["rate"] == 1.0, report

    # the same weights with CTranslate2's built-in [sin | cos] position table: no longer our model
    from core.tokenizer import Tokenizer

    model, _ = load_release(release)
    tokenizer = Tokenizer(release / "tokenizer.model")
    spec = build_spec(model, [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)])
    spec.encoder.position_encodings.encodings = model_spec.OPTIONAL
    spec.decoder.position_encodings.encodings = model_spec.OPTIONAL
    spec.validate()
    spec.optimize(quantization="float32")
    wrong = tmp_path / "ct2-wrong"
    wrong.mkdir()
    spec.save(str(wrong))
    assert check_agreement(release, wrong, SAMPLE_SENTENCES * 4)["rate"] < 0.9


def test_ct2_conversion_of_a_pre_norm_model_scores_every_token_as_pytorch(tiny_model_dir, tmp_path):
    """The general-domain models are pre-norm (x + sublayer(LN(x)), each stack ending in a LayerNorm): the converted
    model's per-token log-probabilities (CTranslate2's score_batch, teacher forcing) equal PyTorch's. A random
    model with random LayerNorm weights, so a missing or misplaced norm shows."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    import shutil

    from bench.ct2_convert import convert
    from core.tokenizer import Tokenizer
    from model.checkpoint import save_release

    tiny, _ = load_release(tiny_model_dir / "release")
    cfg = ModelConfig.from_dict({**tiny.cfg.to_dict(), "norm_placement": "pre"})
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
    out = convert(release, tmp_path / "ct2")
    tokenizer = Tokenizer(release / "tokenizer.model")
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    sources = [tokenizer.encode(s) + [cfg.eos_id] for s in SAMPLE_SENTENCES[:3]]
    targets = [tokenizer.encode(s)[:6] for s in reversed(SAMPLE_SENTENCES[:3])]
    scored = translator.score_batch(
        [[pieces[i] for i in s] for s in sources], [[pieces[i] for i in t] for t in targets]
    )
    for source, target, result in zip(sources, targets, scored, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([source]), torch.tensor([[cfg.bos_id, *target]]))
        expected = torch.log_softmax(logits[0].float(), dim=-1)[range(len(target) + 1), [*target, cfg.eos_id]]
        assert len(result.log_probs) == len(target) + 1
        assert torch.allclose(torch.tensor(result.log_probs), expected, atol=1e-4), (result.log_probs, expected)


def test_profile_engine_splits_cpu_time_and_profiles_the_step(tiny_bundle_dir):
    """bench/profile_engine.py on the tiny bundle: the split adds up, and the step profile names real operators."""
    import json

    from bench.profile_engine import operators, split

    times = split(tiny_bundle_dir, "int8", SAMPLE_SENTENCES * 4, beam=2, batch=8)
    assert times["encoder"] > 0 and times["decoder_step"] > 0
    parts = ("encoder", "decoder_step", "cache reorder", "other (Python)")
    assert abs(sum(times[k] for k in parts) - times["total"]) < 1e-9
    manifest = json.loads((tiny_bundle_dir / "manifest.json").read_text())
    step_graph = tiny_bundle_dir / manifest["variants"]["int8"]["decoder_step"]
    per_op = operators(step_graph, manifest["model"], rows=8, beam=2, steps=5)
    assert {"MatMulIntegerToFloat", "MultiHeadAttention", "TopK"} <= set(per_op)
    assert all(us > 0 for us in per_op.values())


def test_cpu_flags_name_the_vector_extensions_in_order():
    from bench.harness import cpu_flags

    text = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx512_vnni avx2 avx512f\n"
    assert cpu_flags(text) == ["avx2", "avx512f", "avx512_vnni"]
    assert cpu_flags("model name: x\n") == []


def test_profile_engine_splits_a_live_decode_too(tiny_bundle_dir):
    from bench.profile_engine import split

    times = split(tiny_bundle_dir, "int8", SAMPLE_SENTENCES * 2, beam=2, batch=4, decode="live")
    assert times["encoder"] > 0 and times["decoder_step"] > 0 and times["other (Python)"] > 0


def test_profile_engine_splits_a_steady_flow_and_the_cache_reordering(tiny_bundle_dir):
    """--flow: whole batches against one live decode that sentences keep joining; both split out the cache
    reordering, and the parts add up to the total."""
    from bench.profile_engine import split

    for decode in ("whole", "flow"):
        times = split(tiny_bundle_dir, "int8", SAMPLE_SENTENCES * 3, beam=2, batch=4, decode=decode, by_length=False)
        assert times["cache reorder"] > 0 and times["decoder_step"] > 0, decode
        parts = ("encoder", "decoder_step", "cache reorder", "other (Python)")
        assert abs(sum(times[k] for k in parts) - times["total"]) < 1e-9
    with pytest.raises(ValueError):
        split(tiny_bundle_dir, "int8", SAMPLE_SENTENCES, beam=2, batch=4, decode="rounds")


def test_engine_report_lists_each_repeats_ratio_against_ctranslate2():
    from bench.bench_report import repeat_ratios, targets

    def row(engine, setting, tokens, cpus):
        cpu = sorted(cpus)[len(cpus) // 2]
        return {"engine": engine, "setting": setting, "tokens": tokens, "cpus": cpus, "tok_per_cpu_s": tokens / cpu}

    ours = row("ort-int8", "greedy/b32", 1000, [1.0, 2.0, 0.5])
    theirs = row("ct2-int8", "greedy/b32", 1100, [1.1, 1.1, 1.1])
    assert repeat_ratios(ours, theirs) == "1.00 / 0.50 / 2.00"
    rows = [ours, theirs, {**row("ort-fp32", "greedy/b32", 1000, [2.0]), "bleu": 1.0}, {**ours, "bleu": 1.0}]
    text = "\n".join(targets(rows))
    assert "(>= 1.1x)" in text and "greedy/b32 1.00x (1.00 / 0.50 / 2.00)" in text


def test_serving_rounds_pool_into_one_row_and_list_each_rounds_ratio():
    import numpy as np

    from bench.serving import Result, pooled, round_lines

    nan = float("nan")
    a = Result(100, 0, 2.0, np.array([0.1, 0.2]), 4.0, 0.020, 30.0)
    b = Result(100, 0, 4.0, np.array([0.3]), nan, 0.030, 10.0)  # nothing decoded live in this round
    c = Result(100, 0, 3.0, np.array([0.2]), 6.0, 0.010, nan)  # no whole batch in this one
    row = pooled([a, b, c])
    assert row.throughput == 300 / 9.0 and len(row.latencies) == 4 and row.cpu_per_sentence == 0.020
    assert row.mean_batch == 5.0 and row.whole_batch == 20.0  # the rounds that ran such batches
    assert np.isnan(pooled([b, b]).mean_batch)
    off = [Result(100, 0, 2.0, np.array([0.1]), 1.0, 0.010, 1.0)] * 3
    lines = round_lines([(1, {"continuous": [a, b, c], "off": off})])
    assert "continuous vs off: sent/s 1.00 / 0.50 / 0.67; server CPU ms/sent 2.00 / 3.00 / 1.00" in lines
    assert "mean whole batch 30.0:1.0 / 10.0:1.0 / nan:1.0" in lines


def test_server_profile_sorts_py_spy_stacks_by_part():
    from bench.profile_server import categorize

    engine = "thread (7): engine-de-en;Thread.run (threading.py:1)"
    ort_run = "run (onnxruntime/capi/onnxruntime_inference_collection.py:2)"
    step = f"{engine};LiveBatch.step (engine/live.py:9);{ort_run}"
    reorder = "ReorderBuffers.take (engine/reorder.py:27);take (numpy/_core/fromnumeric.py:3)"
    gather = f"{engine};LiveBatch._gather (engine/live.py:9);{reorder}"
    encoder = f"{engine};Engine.run_encoder (engine/engine.py:5);run (onnxruntime/capi/x.py:2)"
    assert categorize(step) == ["step graph"]
    assert categorize(gather) == ["search (Python)", "cache gather"]
    assert categorize(encoder) == ["encoder"]
    assert categorize(f"{engine};ContinuousDriver._next (service/scheduling/continuous.py:1)") == ["scheduler"]
    assert categorize("thread (1): MainThread;Server.run (uvicorn/server.py:1)") == ["event loop"]


def test_server_profile_counts_cpu_per_thread_and_finds_the_engine_threads():
    """The server/engine ratio's two inputs: the kernel's CPU seconds per thread (this process's own, here) and
    which thread ids py-spy named engine threads."""
    import os
    import threading

    from bench.profile_server import engine_threads, thread_cpu

    cpu = thread_cpu(os.getpid())
    assert threading.get_native_id() in cpu and cpu[0] >= cpu[threading.get_native_id()] >= 0
    raw = "thread (41): engine-de-en_0;Thread.run (threading.py:1) 5\nthread (40): MainThread;main (x.py:1) 7\n"
    assert engine_threads(raw + "thread (43): engine-zh-en;run (y.py:2) 1\n") == {41, 43}


def test_http_floors_answer_as_the_service_does_and_report_their_cpu(tmp_path):
    """bench/http_floor.py's two apps really started (the service's uvicorn set-up, loopback), driven as the
    server is (bench/serving.py's closed loop), several sentences per request; the FastAPI floor validates the body
    as a FastAPI service would."""
    import argparse
    import asyncio

    import httpx

    from bench.http_floor import fastapi_app
    from bench.profile_server import FLOORS, floor

    sentences = [f"Ein Satz {i}." for i in range(9)]
    for kind, client in zip(FLOORS, ("raw", "httpx"), strict=True):
        args = argparse.Namespace(clients=3, beam_size=4, model="de-en", stream=False, texts=2, warmup=2, client=client)
        answered, seconds, cpu = floor(kind, sentences, args, tmp_path)
        assert answered == 9 and seconds > 0 and cpu >= 0  # (the last request carries one sentence; CPU in ticks)
    # bench/serving.py's closed loop drives them: a refused request counts every sentence it carried as unanswered
    refused = argparse.Namespace(**{**vars(args), "beam_size": "wide"})  # not an integer: the FastAPI floor's 422
    assert floor("fastapi", sentences, refused, tmp_path)[0] == 0

    async def ask() -> tuple[int, dict]:
        transport = httpx.ASGITransport(app=fastapi_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://floor") as client:
            refused = await client.post("/v1/translate", json={"texts": "not a list"})
            answered = await client.post("/v1/translate", json={"texts": ["a", "b"], "beam_size": 4})
            return refused.status_code, answered.json()

    refused, body = asyncio.run(ask())
    assert refused == 422
    assert [t["text"] for t in body["translations"]] == ["A man rides a bicycle."] * 2


def test_the_raw_client_loop_answers_every_request_on_kept_alive_connections(tmp_path):
    """bench/serving.py --client raw: closed-loop clients on bench/raw_client.py connections against a real server
    (bench/http_floor.py's bare app on loopback); streams are refused, not misread."""
    import asyncio
    import sys

    from bench.harness import ServerProcess
    from bench.raw_client import RawConnection
    from bench.serving import closed_loop

    command = [sys.executable, "-m", "bench.http_floor", "asgi"]
    server = ServerProcess(None, {"MT_LOG_LEVEL": "warning"}, tmp_path / "floor.log", command=command)
    server.start(timeout=60)
    try:
        result = asyncio.run(closed_loop(server.url, list("abcdefg"), 3, 4, "de-en", "raw", client_kind="raw"))
        assert result.errors == 0 and len(result.latencies) == 7

        async def twice() -> list[tuple[int, bytes]]:
            connection = RawConnection(server.url)
            try:
                return [await connection.post_json("/v1/translate", {"texts": [t]}) for t in ("x", "y")]
            finally:
                await connection.close()

        answers = asyncio.run(twice())
        assert [status for status, _ in answers] == [200, 200] and b"A man rides a bicycle." in answers[1][1]
    finally:
        server.stop()
    with pytest.raises(ValueError, match="stream"):
        asyncio.run(closed_loop(server.url, ["a"], 1, 4, "de-en", "raw", stream=True, client_kind="raw"))
    with pytest.raises(ValueError, match="http://"):
        RawConnection("https://example.org")


def test_engine_memory_reads_columns_and_measures_each_arena_mode_in_a_fresh_process(tmp_path, tiny_bundle_dir):
    from bench.engine_memory import measure, read_sentences

    tsv = tmp_path / "pairs.txt"
    tsv.write_text("".join(f"english {i}\tdeutsch {i}\tcc-by\n" for i in range(10)), encoding="utf-8")
    assert read_sentences(f"{tsv}:1", 5) == [f"deutsch {i}" for i in range(0, 10, 2)]
    plain = tmp_path / "plain.de"
    plain.write_text("eins\n\nzwei\ndrei\n", encoding="utf-8")
    assert read_sentences(str(plain), 10) == ["eins", "zwei", "drei"]
    models = [(str(tiny_bundle_dir), list(SAMPLE_SENTENCES))]
    for shared in (True, False):
        result = measure(models, "int8", beam=2, batch=2, shared=shared)
        assert len(result["peaks"]) == 2 and 0 < result["peaks"][0] <= result["peaks"][1]
        assert result["cpu"] > 0


def test_step_graphs_ratios_compare_each_graph_with_the_same_bundles_live_step():
    from bench.step_graphs import step_ratios

    medians = {
        ("b:int8/decoder_step", 32): 2.0,
        ("b:int8/decoder_step_batch", 32): 1.5,
        ("b:int8/decoder", 32): 5.0,
        ("b:fp32/decoder_step_batch", 32): 9.0,  # no live step timed for fp32: no ratio
    }
    assert step_ratios(medians) == {("b:int8/decoder_step_batch", 32): 0.75, ("b:int8/decoder", 32): 2.5}


def test_live_flow_compares_two_bundles_and_counts_equal_answers(tiny_bundle_dir, tmp_path, capsys):
    """bench/live_flow.py on the tiny bundle against itself: every answer the same, the ratio 1.00x for the first."""
    from bench.live_flow import main

    (tmp_path / "test_2016_flickr.de").write_text("\n".join(SAMPLE_SENTENCES) + "\n", encoding="utf-8")
    args = ["--data", str(tmp_path), "--bundles", str(tiny_bundle_dir), str(tiny_bundle_dir), "--repeats", "1"]
    assert main([*args, "--variant", "fp32", "--batch", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {tiny_bundle_dir}")]
    assert len(rows) == 2
    assert all(row.endswith(f"| {len(SAMPLE_SENTENCES)} / {len(SAMPLE_SENTENCES)} |") for row in rows)
    assert "| 1.00x |" in rows[0]
