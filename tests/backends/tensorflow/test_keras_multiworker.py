"""MultiWorkerMirroredStrategy with two local worker processes (TF_CONFIG on 127.0.0.1 ports), fp16
custom loop (``strategy.run(mp.train_step)`` in a ``tf.function``): an overflow in worker 1's batch,
then in worker 0's — both workers skip the step, halve the scale and keep their weights; the clean
step after trains. (Keras 3.15's own LossScaleOptimizer decides per replica on this no-merge-call
path: one worker would apply and all-reduce while the other skipped.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tensorflow

HERE = os.path.dirname(os.path.abspath(__file__))


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_two_workers_skip_together_on_either_workers_overflow():
    ports = ",".join(map(str, _free_ports(2)))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    workers = [subprocess.Popen([sys.executable, os.path.join(HERE, "keras_worker_case.py"), str(i), ports], cwd=HERE,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = []
    try:
        for w in workers:
            out, err = w.communicate(timeout=600)
            outs.append((w.returncode, out, err))
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    want = "[(32.0, True, True), (16.0, True, True), (16.0, False, True)]"
    for i, (rc, out, err) in enumerate(outs):
        assert rc == 0, f"worker {i}:\n{out[-2000:]}\n{err[-3000:]}"
        assert f"worker {i} {want}" in out, out  # (scale after, weights unchanged, weights finite) per step
