"""The samples run, and agree with NumPy re-implementations."""
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dg

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(scope="module")
def tree():
    return dg.load(SAMPLES / "tree.dg", mode="interp")


@pytest.fixture(scope="module")
def mlp():
    return dg.load(SAMPLES / "mlp.dg", mode="interp")


def np_tree(x, lo, hi, w, wl, wr):
    if hi - lo == 1:
        return np.tanh(x[lo] @ w)
    mid = (lo + hi) // 2
    return np.tanh(np_tree(x, lo, mid, w, wl, wr) @ wl + np_tree(x, mid, hi, w, wl, wr) @ wr)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_recursive_tree_matches_numpy(tree, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    w, wl, wr = (rng.standard_normal((4, 4)).astype(np.float32) * 0.5 for _ in range(3))
    got = tree.score(x, w, wl, wr)
    want = np_tree(x, 0, n, w, wl, wr).sum()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_mlp_forward_matches_numpy(mlp):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    w1, b1 = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    w2, b2 = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    got = mlp.forward(x, w1, b1, w2, b2)
    want = np.tanh(x @ w1 + b1) @ w2 + b2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    y = np.array([0, 1, 2, 0, 1, 2])
    logits = want.astype(np.float64)
    lsm = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    np.testing.assert_allclose(mlp.loss(x, y, w1, b1, w2, b2), -lsm[np.arange(6), y].mean(), rtol=1e-5)


def test_mlp_main_runs(mlp, capsys):
    out = mlp.main()
    assert out.shape == (8,) and out.dtype == np.int64
    assert capsys.readouterr().out.startswith("loss ")


def test_digits_mlp_trains_to_over_90_percent_in_compiled_mode():
    pytest.importorskip("sklearn", reason="the digits sample needs scikit-learn (in the dev extras)")
    import importlib.util

    spec = importlib.util.spec_from_file_location("digits_sample", SAMPLES / "digits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    acc = mod.train(epochs=12, mode="compiled", verbose=False)
    assert acc > 0.9, acc


def _sample(name: str):
    """samples/NAME.py as a module (it needs scikit-learn for its data)."""
    pytest.importorskip("sklearn", reason=f"the {name} sample needs scikit-learn (in the dev extras)")
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_sample", SAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _digits_sample():
    return _sample("digits")


def test_digits_shows_progress_and_saves_a_loss_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the loss plot needs matplotlib (dg[viz])")
    pytest.importorskip("tqdm", reason="the progress bar needs tqdm (dg[viz])")
    mod = _digits_sample()
    plot = tmp_path / "loss.png"
    assert mod.train(epochs=2, mode="interp", plot=plot) > 0.5
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out, err = capsys.readouterr()
    assert "epoch   2  loss " in out and "test accuracy " in out and f"loss plot saved to {plot}" in out
    assert "loss=" in err and "epoch=2" in err  # the bar's postfix


@pytest.mark.slow
def test_digits_runs_without_tqdm_and_matplotlib(tmp_path):
    pytest.importorskip("sklearn", reason="the digits sample needs scikit-learn (in the dev extras)")
    import subprocess
    import sys

    hide = ("import runpy, sys\n"
            "sys.modules['tqdm'] = sys.modules['matplotlib'] = None  # as if not installed\n"
            "sys.argv = ['digits.py', '--epochs', '3', '--mode', 'interp']\n"
            f"runpy.run_path({str(SAMPLES / 'digits.py')!r}, run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", hide], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "epoch   3  loss " in r.stdout and "test accuracy " in r.stdout
    assert "the loss plot needs matplotlib: pip install 'dg[viz]'" in r.stdout
    assert "step/s" not in r.stderr and not list(tmp_path.iterdir())  # no bar, no plot


def _cnn_sample():
    return _sample("cnn")


@pytest.mark.slow  # (a training run of 20 s to 2 min: the slow tier)
def test_cnn_trains_to_98_percent_in_compiled_mode():
    acc, history = _cnn_sample().train(mode="compiled", verbose=False)  # the defaults: 20 epochs, ~6 s
    assert acc >= 0.98, acc
    assert np.mean(history[-1]) < 0.05 * np.mean(history[0])


@pytest.mark.slow  # (a training run of 20 s to 2 min: the slow tier)
def test_cnn_short_compiled_run_learns():
    acc, history = _cnn_sample().train(epochs=2, mode="compiled", verbose=False)
    assert acc > 0.85, acc
    assert np.mean(history[1]) < np.mean(history[0])


def test_cnn_step_agrees_between_modes_and_lowers_the_loss():
    mod = _cnn_sample()
    (x, y), _ = mod.load_data(0)
    x, y = mod.images(x[:32]), y[:32]
    lr, mu = np.float32(0.05), np.float32(0.9)
    firsts = {}
    for mode in ("interp", "compiled"):
        m = mod.load(mode)
        params = mod.init_params(0)
        state = m.init_state(params)
        losses = []
        for _ in range(5):  # the same batch each step
            loss, params, state = m.step(params, state, x, y, lr, mu)
            assert sorted(params) == sorted(mod.SHAPES) and sorted(state) == ["buf", "step"]
            losses.append(float(loss))
        assert losses[-1] < losses[0], (mode, losses)
        firsts[mode] = losses[0]
    np.testing.assert_allclose(firsts["interp"], firsts["compiled"], rtol=1e-5)


def test_cnn_shows_progress_and_saves_a_loss_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the loss plot needs matplotlib (dg[viz])")
    pytest.importorskip("tqdm", reason="the progress bar needs tqdm (dg[viz])")
    plot = tmp_path / "loss.png"
    _cnn_sample().train(epochs=1, mode="interp", plot=plot, max_steps=10)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out, err = capsys.readouterr()
    assert "epoch   1  loss " in out and "10 steps in " in out and f"loss plot saved to {plot}" in out
    assert "loss=" in err and "epoch=1" in err


def _text_sample(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_sample", SAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow  # (a training run of 20 s to 2 min: the slow tier)
def test_gpt_short_compiled_run_falls_well_below_the_unigram_baseline():
    """A one-layer version of samples/gpt.py for 150 steps: the held-out loss ends well below what
    the characters' frequencies alone give."""
    gpt = _text_sample("gpt")
    test, baseline, losses = gpt.train(steps=150, layers=1, verbose=False, sample=0)
    assert test < 0.85 * baseline, (test, baseline)
    assert np.mean(losses[-10:]) < np.mean(losses[:10])


def test_gpt_params_are_a_record_with_a_tuple_of_blocks():
    gpt = _text_sample("gpt")
    p = gpt.init_params(vocab=7, context=8, channels=16, layers=2)
    assert isinstance(p["blocks"], tuple) and len(p["blocks"]) == 2 and p["blocks"][0]["wq"].shape == (16, 16)
    train_ids, test_ids, chars = gpt.load_text()
    assert len(chars) < 80 and len(test_ids) * 9 < len(train_ids) * 1.2
    assert 2.0 < gpt.unigram_baseline(train_ids, test_ids, len(chars)) < np.log(len(chars))


@pytest.mark.slow  # (a training run of 20 s to 2 min: the slow tier)
def test_char_rnn_short_compiled_run_learns_and_generates():
    rnn = _text_sample("char_rnn")
    test, baseline, losses = rnn.train(steps=40, verbose=False, sample=0)
    assert test < 0.85 * baseline, (test, baseline)
    m = rnn.load("compiled")
    _, _, chars = rnn.load_text()
    p = rnn.init_params(len(chars))
    text = rnn.generate(lambda ids: m.next_logits(p, ids), chars, "The ", 5, 32)
    assert text.startswith("The ") and len(text) == 9


@pytest.mark.slow
def test_dynamic_models_train_the_same_per_example_and_batched(capsys):
    """samples/dynamic.py: the tagger and the Tree-LSTM, their minibatch loops batched by dg and run
    one example after another, take the same steps, and the held-out loss goes down."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dynamic_sample", SAMPLES / "dynamic.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--steps", "4", "--batch", "8"])
    for name in ("tag", "tree"):
        assert out[name]["same"] and out[name]["held_out"][1] < out[name]["held_out"][0], out[name]
    assert "sentences/s" in capsys.readouterr().out


def test_exported_digits_model_trains_and_classifies_from_c(tmp_path):
    """samples/export: the digits model exported, trained and run by a C program with no Python."""
    pytest.importorskip("sklearn", reason="the digits sample needs scikit-learn (in the dev extras)")
    if shutil.which("cc") is None or shutil.which("objcopy") is None:
        pytest.skip("no C compiler and binutils here: the exported library cannot be built")
    done = subprocess.run([sys.executable, str(SAMPLES / "export" / "build.py"), "--out", str(tmp_path), "--steps", "400"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    accuracy = float(done.stdout.split("test accuracy ")[1].split()[0])
    assert accuracy > 0.9, done.stdout
    assert "a bad label is caught:" in done.stdout and "label 12 is outside [0, 10)" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".so", ".a", ".h")) == [
        "digits.h", "libdigits.a", "libdigits.so"]
