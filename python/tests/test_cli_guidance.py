"""The command line guides a user who is off the path: the .npy example runs from any
directory (or says how to point it at attnlab), and a misspelt command names the closest."""

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "npy_attention.sh"
CLI = os.environ.get("ATTNLAB_CLI")
pytestmark = pytest.mark.skipif(not CLI, reason="ATTNLAB_CLI is not set (ctest sets it to the built attnlab program)")


def run_script(script, cwd, **env):
    clean = {k: v for k, v in os.environ.items() if k != "ATTNLAB"}
    clean["PATH"] = "/usr/bin:/bin"  # no attnlab on it
    return subprocess.run(["sh", str(script)], cwd=cwd, env={**clean, **env}, capture_output=True, text=True,
                          timeout=120)


def test_the_npy_example_finds_the_build_beside_it_from_any_directory(tmp_path):
    repo = tmp_path / "repo"
    (repo / "examples").mkdir(parents=True)
    (repo / "build").mkdir()
    shutil.copy(SCRIPT, repo / "examples")
    os.symlink(CLI, repo / "build" / "attnlab")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_script("../repo/examples/npy_attention.sh", elsewhere)
    assert done.returncode == 0, done.stderr
    assert "(1, 4, 16, 32) (1, 4, 16) float32" in done.stdout
    assert (elsewhere / "out.npy").exists()  # written into the current directory


def test_the_npy_example_without_attnlab_says_how_to_point_at_it(tmp_path):
    (tmp_path / "examples").mkdir()
    shutil.copy(SCRIPT, tmp_path / "examples")
    done = run_script(tmp_path / "examples" / "npy_attention.sh", tmp_path)
    assert done.returncode == 127
    assert "no attnlab at" in done.stderr and "set ATTNLAB=/path/to/attnlab" in done.stderr
    assert not (tmp_path / "q.npy").exists()
    done = run_script(tmp_path / "examples" / "npy_attention.sh", tmp_path, ATTNLAB=CLI)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("argv, closest", [(["atention"], "attnlab attention"),
                                           (["attention-backwrd"], "attnlab attention-backward"),
                                           (["repot", "--quick"], "attnlab report"),
                                           (["run", "gradflw"], "attnlab run gradflow"),
                                           (["run", "--quick", "saturaton"], "attnlab run saturation")])
def test_a_misspelt_command_names_the_closest(argv, closest):
    done = subprocess.run([CLI, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"unknown command '{[w for w in argv if not w.startswith('-')][-1]}' (did you mean '{closest}'?" \
        in done.stderr, done.stderr


def test_a_word_far_from_every_command_gets_no_guess():
    done = subprocess.run([CLI, "frobnicate"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "unknown command 'frobnicate' (`attnlab --help` lists them)" in done.stderr, done.stderr


def test_a_missing_command_still_says_so():
    done = subprocess.run([CLI], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "A subcommand is required" in done.stderr + done.stdout
