"""The model and batch a PyTorch audit runs on, and what its document says was fed.

Three sources, in this order: the library's own ``(inputs, targets)`` (``ampkit.audit(model, batch)``);
the user's data (``--data MODULE:FACTORY``: its first batch); the workload's ``make_batch`` (a bare
model's fits its input layer: token ids for an embedding, :mod:`.workloads.inputs`). The batch is
described (kind, dtype, shape, range) in the report's ``input``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from ...checks import shape_from_data
from ...errors import UsageError
from ...factory import call_user, load_factory
from .workloads import Workload, build_workload, cross_entropy
from .workloads.inputs import input_description

#: the default batch of an audit of a zoo workload on a CPU: an audited step keeps a float32 copy of
#: every module's output besides two graphs (measured: bert-base at batch 4, sequence 128, peaks at
#: 4.5 GB; at its bench batch of 32 it was killed for memory on a 24 GiB machine)
CPU_ZOO_AUDIT_BATCH = 4
ZOO = ("resnet50", "vit_b_16", "bert-base", "gpt2")


def audit_batch_size(workload: Workload, name: str | None, device) -> tuple[int, str | None]:
    """The batch to audit at and a note when it is not the workload's own: the zoo's on a CPU is
    capped (``--batch-size`` overrides it). Gradient magnitudes depend on the batch (a mean loss),
    so the note says so."""
    if device.type == "cpu" and name in ZOO and workload.batch_size > CPU_ZOO_AUDIT_BATCH:
        return CPU_ZOO_AUDIT_BATCH, (f"audited at batch {CPU_ZOO_AUDIT_BATCH}, not {name}'s {workload.batch_size}, "
                                     "to fit a CPU's memory; gradients scale with 1/batch, so pass --batch-size "
                                     "to audit the batch you train with")
    return workload.batch_size, None


def live_workload(live, device) -> tuple[Workload, Any, dict]:
    """The library's model or Workload on ``device``, the batch to audit (a Workload makes its own
    when none was given) and what was fed."""
    if isinstance(live.model, Workload):
        workload = live.model
        workload.model.to(device)
        if live.batch is not None:
            return workload, live.batch, input_description(live.batch[0], "given")
        batch = workload.make_batch(workload.batch_size, device, torch.Generator().manual_seed(0))
        return workload, batch, input_description(batch[0], **_kind(workload))
    if not isinstance(live.model, nn.Module):
        raise UsageError(f"audit() takes a torch.nn.Module or an ampkit.Workload; received {type(live.model).__name__}")
    if live.batch is None:
        raise UsageError("audit(model, batch=(inputs, targets)) needs a batch, or pass an ampkit.Workload")
    batch = live.batch
    wl = Workload(live.model.to(device), lambda *a: batch, loss_fn=live.loss_fn or cross_entropy)
    return wl, batch, input_description(batch[0], "given")


def _kind(workload: Workload) -> dict:
    return dict(workload.input) if workload.input else {"kind": "workload", "from": workload.name}


def _is_data_set(obj) -> bool:
    return isinstance(obj, (Dataset, DataLoader)) or (
        isinstance(obj, (tuple, list)) and len(obj) == 2 and all(isinstance(a, torch.Tensor) or hasattr(a, "__array__")
                                                                 for a in obj))


def user_data(spec: str):
    """``--data MODULE:FACTORY``: what the factory returns -- one data set (a Dataset, a DataLoader, an
    ``(inputs, targets)`` pair of tensors or arrays) or parity's ``(train, validation)`` pair (its train
    part) -- as a feed; a usage line for anything else."""
    from .parity_data import make_feed

    obj = call_user(load_factory(spec, flag="--data"), spec)
    if isinstance(obj, (tuple, list)) and len(obj) == 2 and all(_is_data_set(p) for p in obj):
        obj = obj[0]  # parity's (train, validation): the train part
    return make_feed(obj, "audit", spec, 1)


def first_batch(feed, spec: str, batch_size: int | None, device) -> tuple[Any, dict]:
    """The feed's first batch (in order) on ``device``, of ``batch_size`` samples (None: the feed's own
    batching, a DataLoader's), and what was fed."""
    from .parity_data import _first

    loader = getattr(feed, "loader", None)
    if batch_size and not (loader is not None and loader.batch_size):  # a DataLoader's own batches stay
        feed.batch_size = batch_size
    batch = _first(feed, "audit", spec, device)
    return batch, input_description(batch[0], "data", **{"from": spec})


def session_inputs(config, device) -> tuple[Workload, Any, tuple[str, ...], dict]:
    """The config's workload or model, the batch to audit, notes and what was fed. With ``--data`` the
    data is read first (seeded): a bare model takes its input shape from it."""
    feed, input_shape = None, config.input_shape
    if config.data:
        torch.manual_seed(config.seed)
        feed = user_data(config.data)
        peek, _ = first_batch(feed, config.data, None, torch.device("cpu"))
        x = peek[0]
        input_shape = shape_from_data(config.input_shape, x.shape[1:] if isinstance(x, torch.Tensor) else None,
                                      config.data)
    workload = build_workload(config.workload, config.model, input_shape, config.num_classes, device,
                              seed=config.seed, seq_len=config.seq_len, image_size=config.image_size)
    bs, note = ((config.batch_size, None) if config.batch_size
                else audit_batch_size(workload, config.workload, device))
    if feed is not None:
        batch, fed = first_batch(feed, config.data, bs, device)
        return workload, batch, (), fed
    batch = workload.make_batch(bs, device, torch.Generator().manual_seed(config.seed))
    return workload, batch, (note,) if note else (), input_description(batch[0], **_kind(workload))
