"""python/examples/scaling_demo.py runs, writes its PNG, and shows C6."""

import importlib.util
import pathlib

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="python3-matplotlib is not installed")

DEMO = pathlib.Path(__file__).resolve().parents[1] / "examples" / "scaling_demo.py"


def test_scaling_demo_writes_png_and_reproduces_c6(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("scaling_demo", DEMO)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    results = demo.main(["--out-dir", str(tmp_path), "--dims", "4,64,1024", "--seeds", "2"])
    png = tmp_path / "scaling_demo.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out
    scaled, unscaled = results["inv_sqrt_d"], results["none"]
    # With 1/sqrt(d_k) the typical row's gradient stays of the same order across d_k ...
    for col in (0, 1):
        assert np.max(scaled[:, col]) / np.min(scaled[:, col]) < 2
    # ... without it, it collapses at large d_k (median ||dQ_i|| and ||dK_j||).
    assert unscaled[-1, 0] < 0.1 * scaled[-1, 0]
    assert unscaled[-1, 1] < unscaled[1, 1]
