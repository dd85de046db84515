# SPDX-License-Identifier: BSD-2-Clause
"""A model `shadowsync export` wrote, loaded into the PyTorch DLRM of
shadowsync.examples.dlrm, scores a Criteo file (docs/export.md):

    shadowsync export --load model.ckpt --out model
    python3 -m shadowsync.examples.exported model --data test.txt
    python3 -m shadowsync.examples.exported model --data test.txt \\
        --check p.txt   # what `shadowsync predict` wrote for test.txt

It prints the held-out figures (as `shadowsync eval` does); --out writes
one probability a line, --check compares them with a file of them.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

from shadowsync import ShadowSyncError, train
from shadowsync.examples.dlrm import DLRM, SPARSE, LocalBags, predict


def load(folder):
    """The model in @folder as a DLRM in eval mode, and its model.json."""
    with open(os.path.join(folder, "model.json")) as f:
        config = json.load(f)
    if (config.get("format"), config.get("version")) != ("shadowsync-dlrm",
                                                         1):
        raise ValueError(f"{folder}: not a shadowsync-dlrm export of "
                         "version 1")
    weights = {t["name"]: torch.from_numpy(np.load(os.path.join(
        folder, t["file"]))) for t in config["tensors"]}
    dim = config["emb_dim"]
    dcn = config.get("interaction_kind", "dot") == "dcn"
    cross = (config["cross_layers"], config["cross_rank"]) if dcn else None
    model = DLRM(LocalBags(config["rows"], dim), dim, config["bottom"],
                 config["top"], cross)
    # the tables one after the other, as LocalBags keeps them; layer k of
    # an MLP at index 2k of its nn.Sequential (a ReLU between layers)
    state = {"bags.bag.weight": torch.cat(
        [weights[f"embedding.{j}"] for j in range(SPARSE)])}
    for mlp, layers in (("bottom", len(config["bottom"]) - 1),
                        ("top", len(config["top"]))):
        for k in range(layers):
            for part in ("weight", "bias"):
                state[f"{mlp}.{2 * k}.{part}"] = weights[f"{mlp}.{k}.{part}"]
    for k in range(cross[0] if cross else 0):
        for ours, theirs in (("W", "W"), ("V", "V"), ("b", "bias")):
            state[f"cross.{ours}.{k}"] = weights[f"cross.{k}.{theirs}"]
    model.load_state_dict(state)
    return model.eval(), config


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m shadowsync.examples.exported",
        description="Score a Criteo file with a model `shadowsync export` "
        "wrote, in PyTorch.")
    p.add_argument("folder", help="what shadowsync export --out made")
    p.add_argument("--data", required=True, help="Criteo TSV to score")
    p.add_argument("--out", help="write one probability a line here")
    p.add_argument("--check", help="a file of probabilities (shadowsync "
                   "predict's) to compare with: exit 1 if one differs by "
                   "more than --tolerance")
    p.add_argument("--tolerance", type=float, default=1e-5,
                   help="largest difference --check accepts (1e-5)")
    a = p.parse_args(argv)
    model, config = load(a.folder)
    ex = train.read(a.data)
    probs = predict(model, ex, ex.rows(config["rows"]))
    m = train.metrics(probs, ex.labels)
    print(f"{m['count']} examples: NE {m['ne']:.4f}, AUC {m['auc']:.4f}, "
          f"log loss {m['log_loss']:.4f}, calibration "
          f"{m['calibration']:.4f}")
    if a.out:
        np.savetxt(a.out, probs, fmt="%.7g")
    if a.check:
        want = np.loadtxt(a.check, dtype=np.float64, ndmin=1)
        if want.shape != probs.shape:
            print(f"--check {a.check}: {len(want)} probabilities for "
                  f"{len(probs)} examples", file=sys.stderr)
            return 1
        worst = int(np.argmax(np.abs(probs - want)))
        diff = abs(float(probs[worst]) - want[worst])
        print(f"largest difference from {a.check}: {diff:.3g} (example "
              f"{worst + 1})")
        if diff > a.tolerance:
            return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ShadowSyncError as e:
        print(f"exported: error: {e.what}: {e.why}", file=sys.stderr)
        sys.exit(1)
    except (OSError, ValueError, KeyError) as e:
        print(f"exported: error: {e}", file=sys.stderr)
        sys.exit(1)
