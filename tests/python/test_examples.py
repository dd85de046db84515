# SPDX-License-Identifier: BSD-2-Clause
"""The examples a user copies: the DLRM under `shadowsync launch -n 2`,
its JSON (the job's and each rank's), the DCN alone, and a model
exported from `shadowsync train` loaded into the DLRM."""
import inspect
import json
import os
import subprocess

import numpy as np
import pytest
from conftest import PYTHON, ROOT, TRANSPORT, port_block

SHADOWSYNC = os.path.join(ROOT, "build", "bin", "shadowsync")
SMALL = ["--emb-dim", "4", "--bottom", "13-16-4", "--top", "16-1",
         "--hash-size", "2000", "--progress", "0"]
# rows a table, each its own (as Criteo's cardinalities differ)
SIZES = ",".join(str(3 + j * 97 % 2000) for j in range(26))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    for name, args in (("train.txt", ["--examples", "6000"]),
                       ("test.txt", ["--examples", "1000", "--stream", "1"])):
        subprocess.run([SHADOWSYNC, "gen-data", "--out", str(d / name),
                        "--cardinality", "300", *args], check=True,
                       capture_output=True)
    return d


def env():
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src", "python"))
    for k in ("SS_PEERS", "SS_RANK", "RANK", "WORLD_SIZE"):
        e.pop(k, None)
    return e


def test_dlrm_trains_under_launch_and_prints_the_jobs_json(data):
    host = ["--host", os.environ["SS_RXE_ADDR"]] \
        if TRANSPORT == "verbs" else []
    out = subprocess.run(
        [SHADOWSYNC, "launch", "-n", "2", "--transport", TRANSPORT,
         "--port", str(port_block()), *host, "--json", "--", PYTHON, "-m",
         "shadowsync.examples.dlrm", "--data", str(data / "train.txt"),
         "--test", str(data / "test.txt"), *SMALL],
        env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    job = json.loads(out.stdout.strip().splitlines()[-1])
    assert job["world"] == 2 and job["failed"] == 0, job
    assert job["examples"] == 6000, job
    assert job["examples_per_s"] > 0 and 0 < job["test_ne"] < 1, job
    assert 0.5 < job["test_auc"] <= 1, job
    for r, rank in enumerate(job["ranks"]):
        assert rank["rank"] == r and rank["transport"] == TRANSPORT, rank
        assert rank["rounds"] > 0 and rank["dropped"] == 0, rank
        assert rank["rows_remote"] > 0, rank  # the tables are sharded


def test_dlrm_alone_is_a_world_of_one(data):
    out = subprocess.run(
        [PYTHON, "-m", "shadowsync.examples.dlrm", "--data",
         str(data / "train.txt"), "--test", str(data / "test.txt"), *SMALL],
        env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    rank = json.loads(out.stdout.strip().splitlines()[-1])
    assert rank["world"] == 1 and rank["examples"] == 6000, rank
    assert rank["test_ne"] < 1, rank


def test_dlrm_names_a_bad_line_of_its_data(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("1\t2\tx\n")
    out = subprocess.run(
        [PYTHON, "-m", "shadowsync.examples.dlrm", "--data", str(bad)],
        env=env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out
    assert f"{bad}:1" in out.stderr, out.stderr


def test_dcn_with_multi_hot_bags_learns(tmp_path):
    out = subprocess.run(
        [PYTHON, "-m", "shadowsync.examples.dcn", "--examples", "20000",
         "--test-examples", "4000"],
        env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    rank = json.loads(out.stdout.strip().splitlines()[-1])
    assert rank["test_ne"] < 0.95 and rank["test_auc"] > 0.7, rank


def test_an_exported_sharded_model_predicts_in_pytorch_as_predict_does(
        data, tmp_path):
    """train (two ranks, sharded tables, each of its own size) -> predict
    -> export -> the docs' loader: PyTorch gives the probabilities predict
    wrote, to float precision; a changed weight is caught."""
    host = ["--host", os.environ["SS_RXE_ADDR"]] \
        if TRANSPORT == "verbs" else []
    shards = str(tmp_path / "s.{rank}")
    model, probs = tmp_path / "model", tmp_path / "p.txt"
    for args in (["launch", "-n", "2", "--transport", TRANSPORT, "--port",
                  str(port_block()), *host, "--", "train", "--data",
                  str(data / "train.txt"), "--threads", "1", "--save",
                  shards, *SMALL, "--hash-size", SIZES],
                 ["predict", "--load", shards, "--data",
                  str(data / "test.txt"), "--out", str(probs)],
                 ["export", "--load", shards, "--out", str(model)]):
        out = subprocess.run([SHADOWSYNC, *args], env=env(),
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
    check = [PYTHON, "-m", "shadowsync.examples.exported", str(model),
             "--data", str(data / "test.txt"), "--check", str(probs)]
    out = subprocess.run(check, env=env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1000 examples: NE " in out.stdout, out.stdout
    # one table changed: the check fails
    emb = np.load(model / "embedding.7.npy")
    emb[:] *= 1.5
    np.save(model / "embedding.7.npy", emb)
    out = subprocess.run(check, env=env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr


def test_an_exported_dcn_model_predicts_in_pytorch_as_predict_does(
        data, tmp_path):
    """train --interaction dcn -> predict -> export -> the loader: the
    DLRM with its CrossNet gives predict's probabilities; a changed
    cross weight is caught."""
    ckpt, model, probs = (tmp_path / "m.ckpt", tmp_path / "model",
                          tmp_path / "p.txt")
    for args in (["train", "--data", str(data / "train.txt"), "--threads",
                  "1", "--save", str(ckpt), *SMALL, "--interaction", "dcn",
                  "--cross-layers", "2", "--cross-rank", "8"],
                 ["predict", "--load", str(ckpt), "--data",
                  str(data / "test.txt"), "--out", str(probs)],
                 ["export", "--load", str(ckpt), "--out", str(model)]):
        out = subprocess.run([SHADOWSYNC, *args], env=env(),
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
    check = [PYTHON, "-m", "shadowsync.examples.exported", str(model),
             "--data", str(data / "test.txt"), "--check", str(probs)]
    out = subprocess.run(check, env=env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    w = np.load(model / "cross.1.W.npy")
    w[:] *= 1.5
    np.save(model / "cross.1.W.npy", w)
    out = subprocess.run(check, env=env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr


def test_the_docs_show_the_exported_models_loader_as_it_is():
    """docs/export.md's loader is exported.py's, line for line."""
    from shadowsync.examples import exported
    with open(os.path.join(ROOT, "docs", "export.md")) as f:
        docs = f.read()
    assert inspect.getsource(exported.load) in docs
