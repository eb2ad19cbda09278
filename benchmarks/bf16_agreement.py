"""bf16 judged like fp16 (issue #50 point 4), as a user meets it: does the bf16 audit agree with parity?

The case: transformers' ``GPT2LMHeadModel`` from a ``GPT2Config`` (random weights, nothing downloaded)
whose query and key weights (the first two thirds of each block's ``c_attn``) are scaled x300, trained
on a synthetic language made here: a fixed Markov chain over 256 tokens in which each token has four
successors, one with probability 0.7 (so a model that learns reaches 70% next-token accuracy and a
loss near the chain's entropy, 0.94 nats). With the scores that large, each attention head picks one
earlier token; bf16's rounding of the scores changes some of those picks.

This file is both the user's factories and the script that compares the instruments::

    ampkit audit  --model benchmarks/bf16_agreement.py:model --data benchmarks/bf16_agreement.py:data --mode bf16
    ampkit parity --model benchmarks/bf16_agreement.py:model --data benchmarks/bf16_agreement.py:data \\
                  --modes fp32,bf16 --seeds 3 --steps 300 --batch-size 16

    python benchmarks/bf16_agreement.py [--steps 300] [--seeds 3] [--batch-size 16] [--tiny]

The script runs the bf16 and fp16 audits, the what-if and parity (the CLI, JSON documents; `ampkit plan` takes the `workload` factory),
and a plain hand loop (fp32 and bf16 autocast, the same seeds, initial weights and batches) as the
referee, and prints each verdict with its figures. ``--tiny`` (and the ``tiny_model``/``tiny_data``
factories): the suite's size (32 positions, width 64, fewer sequences).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

QK_GAIN = 300.0
VOCAB, SUCCESSORS, FIRST_P = 256, 4, 0.7
SIZES = {"full": {"n_embd": 128, "n_head": 4, "seq": 64, "train": 2048, "valid": 256},
         "tiny": {"n_embd": 64, "n_head": 4, "seq": 32, "train": 512, "valid": 128}}


def gpt2_qk(n_embd: int, n_head: int, seq: int, gain: float = QK_GAIN):
    """GPT-2 (two blocks, no dropout) with its q/k weights x ``gain``. Not seeded here: parity seeds each run."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=max(64, seq), n_embd=n_embd, n_layer=2, n_head=n_head,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    m = GPT2LMHeadModel(cfg)
    with torch.no_grad():  # c_attn's weight is (n_embd, 3 n_embd): the query and key columns first
        for block in m.transformer.h:
            block.attn.c_attn.weight[:, : 2 * n_embd] *= gain
    return m


def language(n: int, seq: int, seed: int):
    """``n`` sequences of the fixed Markov chain: (tokens, next tokens), each (n, seq) int64."""
    import torch

    chain = torch.Generator().manual_seed(1234)  # the language itself: the same in every call
    succ = torch.randint(0, VOCAB, (VOCAB, SUCCESSORS), generator=chain)
    probs = torch.tensor([FIRST_P] + [(1 - FIRST_P) / (SUCCESSORS - 1)] * (SUCCESSORS - 1))
    g = torch.Generator().manual_seed(seed)
    ids = torch.empty(n, seq + 1, dtype=torch.long)
    ids[:, 0] = torch.randint(0, VOCAB, (n,), generator=g)
    for t in range(seq):
        ids[:, t + 1] = succ[ids[:, t], torch.multinomial(probs, n, replacement=True, generator=g)]
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def _data(size: str):
    s = SIZES[size]
    return language(s["train"], s["seq"], 1), language(s["valid"], s["seq"], 2)


def model():
    s = SIZES["full"]
    return gpt2_qk(s["n_embd"], s["n_head"], s["seq"])


def data():
    """(train, validation): (inputs, targets) token tensors."""
    return _data("full")


def tiny_model():
    s = SIZES["tiny"]
    return gpt2_qk(s["n_embd"], s["n_head"], s["seq"])


def tiny_data():
    return _data("tiny")


def _workload(size: str, gain: float = QK_GAIN):
    """An ``ampkit.Workload`` (for ``ampkit plan``/``bench``, which need one for a model of token ids):
    the model and batches of the training sequences (the generator picks them)."""
    import torch

    from ampkit import Workload

    s = SIZES[size]
    (x, y), _ = _data(size)

    def make_batch(batch_size, device, generator):
        idx = torch.randint(0, len(x), (batch_size,), generator=generator)
        return x[idx].to(device), y[idx].to(device)

    return Workload(gpt2_qk(s["n_embd"], s["n_head"], s["seq"], gain), make_batch, name=f"gpt2-qk{gain:g}-{size}",
                    batch_size=16, lr=1e-3, input={"kind": "token_ids", "range": [0, VOCAB]})


def workload():
    return _workload("full")


def tiny_workload():
    return _workload("tiny")


# ---------------------------------------------------------------- the referee: a plain loop
def hand_loop(mode: str, seed: int, size: str, steps: int, batch_size: int, lr: float = 1e-3) -> dict:
    """fp32, or bf16 under ``torch.autocast``: AdamW, the seed's initial weights (seeded as parity
    seeds them), a shuffled order of its own, evaluated in the mode. Returns the validation loss and
    next-token accuracy."""
    import torch
    import torch.nn.functional as F

    (xtr, ytr), (xte, yte) = _data(size)
    torch.manual_seed(seed)
    m = tiny_model() if size == "tiny" else model()
    opt = torch.optim.AdamW(m.parameters(), lr=lr)
    on = mode == "bf16"
    done, epoch = 0, 0
    while done < steps:
        order = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=on):
                logits = m(input_ids=xtr[idx]).logits
            loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), ytr[idx].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            done += 1
            if done >= steps:
                break
        epoch += 1
    m.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=on):
        logits = m(input_ids=xte).logits.float()
    return {"loss": F.cross_entropy(logits.reshape(-1, VOCAB), yte.reshape(-1)).item(),
            "accuracy": (logits.argmax(-1) == yte).float().mean().item()}


def _cli(args: list[str], out: str) -> tuple[dict, float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ampkit", *args, "--json", out], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if not os.path.exists(out):
        raise SystemExit(f"ampkit {' '.join(args)} wrote no document (exit {proc.returncode}): {proc.stderr[-2000:]}")
    with open(out) as fh:
        return json.load(fh), wall, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--tiny", action="store_true", help="the suite's size")
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out: audit,parity,referee")
    a = ap.parse_args()
    size, skip = ("tiny" if a.tiny else "full"), set(filter(None, a.skip.split(",")))
    here = os.path.abspath(__file__)
    prefix = "tiny_" if a.tiny else ""
    factories = ["--model", f"{here}:{prefix}model", "--data", f"{here}:{prefix}data"]
    print(f"load {os.getloadavg()[0]:.1f}; size {size}: {SIZES[size]}; q/k x{QK_GAIN:g}")
    with tempfile.TemporaryDirectory() as tmp:
        if "audit" not in skip:
            for mode in ("bf16", "fp16"):
                doc, wall, rc = _cli(["audit", *factories, "--mode", mode], f"{tmp}/{mode}.json")
                found = [(f["kind"], f["layer"], f["severity"]) for f in doc["findings"]]
                print(f"audit --mode {mode}: exit {rc}, {wall:.0f} s; output error {doc['output_rel_error']:.2%}; "
                      f"findings {found}; note {doc['note']!r}")
                for f in doc["findings"]:
                    print(f"    advice: {f['advice']}")
            doc, wall, rc = _cli(["audit", *factories, "--what-if"], f"{tmp}/whatif.json")
            for fmt, p in doc["what_if"].items():
                print(f"what-if {fmt}: {p['verdict']} keep {p['keep_in_fp32']} ({wall:.0f} s): {p['advice']}")
        if "parity" not in skip:
            doc, wall, rc = _cli(["parity", *factories, "--modes", "fp32,bf16", "--seeds", str(a.seeds), "--steps",
                                  str(a.steps), "--batch-size", str(a.batch_size)], f"{tmp}/parity.json")
            for r in doc["results"]:
                eq = r.get("equivalence") or {}
                print(f"parity {r['mode']}: {r['verdict']} / {eq.get('verdict')} ({wall:.0f} s, exit {rc}); "
                      f"{r['metric']['name']} {r['metric']['mean']:.4f}; delta {r.get('delta_vs_fp32')}; "
                      f"p {r.get('p_value')}; CI {eq.get('ci')}; {r['reason']}")
                if r.get("loss_check"):
                    print(f"    loss: {r['loss_check']}")
        if "referee" not in skip:
            rows = {}
            t0 = time.perf_counter()
            for seed in range(a.seeds):
                for mode in ("fp32", "bf16"):
                    rows[mode, seed] = hand_loop(mode, seed, size, a.steps, a.batch_size)
                    print(f"hand loop seed {seed} {mode}: val loss {rows[mode, seed]['loss']:.4f}, "
                          f"accuracy {rows[mode, seed]['accuracy']:.4f}", flush=True)
            from scipy.stats import ttest_1samp

            for key in ("loss", "accuracy"):
                d = [rows["bf16", s][key] - rows["fp32", s][key] for s in range(a.seeds)]
                p = ttest_1samp(d, 0.0).pvalue if a.seeds > 1 else float("nan")
                print(f"hand loop bf16 - fp32 {key}: {[round(x, 4) for x in d]} (mean {sum(d) / len(d):+.4f}, "
                      f"paired t-test against 0: p={p:.3g}; {time.perf_counter() - t0:.0f} s)")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
