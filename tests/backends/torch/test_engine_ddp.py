"""Two processes under DDP (gloo, CPU): an overflow on one rank's batch is skipped on both."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
import torch.nn as nn

from ampkit.backends.torch.engine import MixedPrecision

STEPS = 6
ACCUM = 2


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        ddp = nn.parallel.DistributedDataParallel(net)
        allreduces = []

        def counting_hook(state, bucket):
            allreduces.append(1)
            fut = dist.all_reduce(bucket.buffer().div_(world), async_op=True).get_future()
            return fut.then(lambda f: f.value()[0])

        ddp.register_comm_hook(None, counting_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        mp = MixedPrecision("fp16", "cpu", init_scale=2.0**4, growth_interval=2, accumulation_steps=ACCUM, model=ddp)
        g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
        skipped, scales, rounds = [], [], []
        for step in range(STEPS):
            before = len(allreduces)
            for micro in range(ACCUM):
                x, y = torch.randn(4, 8, generator=g), torch.randint(0, 4, (4,), generator=g)
                with mp.accumulate():
                    with mp.autocast():
                        loss = nn.functional.cross_entropy(ddp(x), y)
                    if rank == 1 and step == 2 and micro == 1:
                        loss = loss * float("inf")  # overflow on ONE rank's batch only
                    mp.backward(loss)
            rounds.append(len(allreduces) - before)
            r = mp.step(opt, zero_grad=True)
            skipped.append(r.skipped)
            scales.append(r.scale)
        torch.save({"skipped": skipped, "scales": scales, "rounds": rounds,
                    "weights": {k: v.detach().clone() for k, v in net.state_dict().items()}},
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_ddp_overflow_on_one_rank_skips_on_both(tmp_path):
    tmp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert r0["skipped"] == r1["skipped"] == [s == 2 for s in range(STEPS)]
    assert r0["scales"] == r1["scales"] == [16.0, 32.0, 16.0, 16.0, 32.0, 32.0]
    # no_sync on the first micro-batch: one all-reduce round (one bucket here) per optimizer step
    assert r0["rounds"] == r1["rounds"] == [1] * STEPS
    for k in r0["weights"]:
        assert torch.equal(r0["weights"][k], r1["weights"][k]), k
