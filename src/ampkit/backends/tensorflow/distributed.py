"""Keras under ``tf.distribute`` for ``ampkit bench --strategy mirrored [--replicas N]``."""

from __future__ import annotations

import contextlib

from .tfimport import import_tensorflow


def mirrored_strategy(replicas: int | None, gpu: bool):
    """``(strategy, number of replicas)`` for ``--strategy mirrored``. Raises ValueError in one line
    when the devices asked for are not there (the mode's row says it)."""
    tf = import_tensorflow()
    if gpu:
        gpus = tf.config.list_logical_devices("GPU")
        if replicas is not None and replicas > len(gpus):
            raise ValueError(f"--replicas {replicas} asked for, but TensorFlow sees {len(gpus)} GPU(s)")
        devices = [d.name for d in gpus[: replicas or len(gpus)]]
    else:
        n = replicas or 1
        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
        except RuntimeError:  # TensorFlow initialised already: use what it has
            pass
        have = len(tf.config.list_logical_devices("CPU"))
        if have < n:
            raise ValueError(f"--replicas {n}: TensorFlow was initialised with {have} CPU device(s) before the "
                             "strategy could split the CPU")
        devices = [f"/cpu:{i}" for i in range(n)]
    strategy = tf.distribute.MirroredStrategy(devices)
    return strategy, strategy.num_replicas_in_sync


def strategy_scope(name: str | None, replicas: int | None, gpu: bool):
    """``(context manager, replicas)``: the strategy's scope for ``--strategy``, a null scope and 1 without."""
    if not name:
        return contextlib.nullcontext(), 1
    strategy, n = mirrored_strategy(replicas, gpu)
    return strategy.scope(), n
