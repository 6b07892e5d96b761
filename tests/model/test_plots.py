"""The training-curve PNG."""

from __future__ import annotations

from model.plots import plot_training_curve


def test_plot_training_curve_writes_a_png(tmp_path):
    history = [{"step": s, "train_loss": 5.0 / s, "valid_nll": 4.0 / s, "valid_bleu": 3.0 * s} for s in (100, 200, 300)]
    path = tmp_path / "curve.png"
    plot_training_curve(history, path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    plot_training_curve([], tmp_path / "empty.png")
    assert not (tmp_path / "empty.png").exists()


def test_plot_training_curve_with_directions(tmp_path):
    history = [
        {"step": s, "train_loss": 5.0 / s, "valid_nll": 4.0 / s, "valid_bleu": 3.0 * s,
         "valid_bleu_directions": {"de-en": 4.0 * s, "en-de": 2.0 * s}}
        for s in (100, 200, 300)
    ]  # fmt: skip
    history[0]["valid_bleu_directions"].pop("en-de")  # a direction added later is drawn from its first point
    path = tmp_path / "curve.png"
    plot_training_curve(history, path)
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
