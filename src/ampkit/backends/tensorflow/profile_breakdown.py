"""``bench --explain`` for Keras on TensorFlow: a few ``train_on_batch`` steps under
``tf.profiler.experimental`` (the XPlane trace it writes), grouped into
:data:`ampkit.breakdown.CATEGORIES`."""

from __future__ import annotations

import glob
import math
import os
import tempfile
import time

from ...breakdown import Breakdown, from_op_times, top_matmuls

_OPTIMIZERS = ("adam_w", "adamw", "adam", "sgd", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "ftrl",
               "lion", "lamb", "adafactor", "optimizer")
_LOSS_SCALING_TYPES = {"IsFinite", "All", "IsInf", "IsNan"}
_CAST_TYPES = {"Cast", "_MklCast", "Bitcast"}
_OTHER_TYPES = {"ReadVariableOp", "Identity", "IdentityN", "NoOp", "Const", "VarHandleOp", "_Send", "_Recv",
                "_HostSend", "_HostRecv", "Shape", "ShapeN", "Reshape", "Size", "Rank", "Pack", "Unpack",
                "StridedSlice", "PartitionedCall", "StatefulPartitionedCall", "If", "StatelessIf", "While",
                "_Arg", "_Retval", "Placeholder", "ExpandDims", "Squeeze", "ConcatV2", "Fill", "ZerosLike",
                "OnesLike", "BroadcastTo", "BroadcastGradientArgs", "_MklToTf", "Switch", "Merge"}
APPROXIMATE = ("TensorFlow's executor may run ops on several threads at once: shares are of summed op time; "
               "matmul shapes come from the model's layers (the trace has none), their times split by FLOPs")


def category(name: str, op_type: str) -> str:
    """The category of the op ``name`` (its scope path) of type ``op_type``."""
    parts = name.lower().split("/")
    in_optimizer = any(p == o or p.startswith(o + "_") for p in parts for o in _OPTIMIZERS)
    if op_type in _LOSS_SCALING_TYPES or "loss_scale" in name.lower() or (
            op_type in ("RealDiv", "Mul") and parts[0] == "cond" and not in_optimizer):
        return "loss_scaling"  # a LossScaleOptimizer's unscaling runs in a cond, outside the inner optimizer's scope
    if in_optimizer or op_type.startswith(("ResourceApply", "AssignAdd", "AssignSub")):
        return "optimizer"
    if "MatMul" in op_type or "Conv" in op_type or op_type == "Einsum":
        return "matmul_conv"
    if op_type in _CAST_TYPES:
        return "casts"
    if op_type in _OTHER_TYPES or op_type.startswith(("Assign", "Var")):
        return "other"
    return "elementwise_norm"


def op_times(xspace) -> dict[tuple[str, str], float]:
    """``{(name, op type): milliseconds}`` summed over the host plane's TensorFlow op events."""
    out: dict[tuple[str, str], float] = {}
    for plane in xspace.planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            if not line.name.startswith("tf_"):
                continue
            for ev in line.events:
                md = plane.event_metadata[ev.metadata_id]
                if not md.display_name or "::" in md.name or ":" not in md.name:
                    continue
                key = (md.name.rsplit(":", 1)[0], md.display_name)
                out[key] = out.get(key, 0.0) + ev.duration_ps / 1e9
    return out


def layer_matmuls(model, batch_size: int) -> list[tuple[int, int, int, float]]:
    """``(m, n, k, flops)`` of the model's Dense and Conv layers (their kernels and the batch)."""
    from .workloads import all_layers

    out = []
    for layer in all_layers(model):
        kernel = getattr(layer, "kernel", None)
        shape = tuple(int(d) for d in getattr(kernel, "shape", ()) or ())
        try:
            if len(shape) == 2:  # Dense: (in, out); leading input dims other than the batch multiply m
                lead = [int(d) for d in (layer.input.shape[1:-1] if hasattr(layer, "input") else [])]
                m = batch_size * (int(math.prod(lead)) if lead else 1)
                out.append((m, shape[1], shape[0], 2.0 * m * shape[0] * shape[1]))
            elif len(shape) == 4:  # Conv2D: (kh, kw, in, out)
                oh, ow = (int(d) for d in layer.output.shape[1:3])
                m, k = batch_size * oh * ow, shape[0] * shape[1] * shape[2]
                out.append((m, shape[3], k, 2.0 * m * k * shape[3]))
        except (AttributeError, TypeError, ValueError):
            continue
    return out


def summarize(times: dict[tuple[str, str], float], step_ms: float, steps: int, matmuls) -> Breakdown:
    ms: dict[str, float] = {}
    for (name, op_type), t in times.items():
        cat = category(name, op_type)
        ms[cat] = ms.get(cat, 0.0) + t / steps
    total = sum(ms.values())
    if total > step_ms > 0:  # parallel executor threads: scale the summed op time to the step
        ms = {c: v * step_ms / total for c, v in ms.items()}
    flops = sum(f for *_, f in matmuls) or 1.0
    shapes = [(m, n, k, ms.get("matmul_conv", 0.0) * f / flops) for m, n, k, f in matmuls]
    return from_op_times(ms, step_ms, steps, "tf.profiler.experimental (XPlane): TensorFlow op time on the "
                         "executor threads; the step's time no op covers is 'other'", matmuls=top_matmuls(shapes),
                         approximate=APPROXIMATE)


def profile_steps(model, x, y, steps: int, batch_size: int) -> Breakdown:
    """``steps`` more ``train_on_batch`` calls under TensorFlow's profiler, summarised."""
    from .environment import import_tensorflow

    tf = import_tensorflow()
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    with tempfile.TemporaryDirectory(prefix="ampkit-tfprof-") as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            t0 = time.perf_counter()
            for _ in range(steps):
                model.train_on_batch(x, y)
            wall_ms = (time.perf_counter() - t0) * 1e3 / steps
        finally:
            tf.profiler.experimental.stop()
        files = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
        if not files:
            raise RuntimeError("TensorFlow's profiler wrote no trace")
        space = xplane_pb2.XSpace()
        with open(files[-1], "rb") as fh:
            space.ParseFromString(fh.read())
    return summarize(op_times(space), wall_ms, steps, layer_matmuls(model, batch_size))
