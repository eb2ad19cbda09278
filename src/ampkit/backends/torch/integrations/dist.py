"""The trainer callbacks in a multi-process run (torchrun, Lightning ``ddp``): this process's rank,
and rank 0 gathering every rank's document at the end of training (one ``all_gather_object`` of a
JSON string per rank, on the process group the trainer made; on no other occasion)."""

from __future__ import annotations

import json
import logging

import torch

from ....integrations.ranks import merge_rank_documents
from ....integrations.record import TrainRecord, rank_path

__all__ = ["rank_world", "gather_run_document"]

log = logging.getLogger("ampkit.integrations")


def rank_world(rank=None, world=None) -> tuple[int, int]:
    """(rank, world size): the trainer's own when given, else torch.distributed's (0, 1 alone)."""
    dist = torch.distributed
    if (rank is None or world is None) and dist.is_available() and dist.is_initialized():
        rank = dist.get_rank() if rank is None else rank
        world = dist.get_world_size() if world is None else world
    return int(rank or 0), int(world or 1)


def gather_run_document(record: TrainRecord) -> dict | None:
    """Every rank's document, merged (:func:`merge_rank_documents`), on every rank (rank 0 writes it;
    the others note their role in their own file); None when the process group is gone (each rank's
    own file then stands)."""
    dist = torch.distributed
    if record.world <= 1 or not (dist.is_available() and dist.is_initialized()):
        return None
    mine = json.dumps(record.document(), default=str)
    got: list = [None] * dist.get_world_size()
    try:
        dist.all_gather_object(got, mine)
    except RuntimeError as exc:   # a rank is gone: no merged document, the per-rank files remain
        log.info("%s: could not gather the ranks' records (%s)", record.source, exc)
        return None
    docs = [json.loads(g) for g in got]
    paths = [rank_path(record.json_path, r) if record.json_path else None for r in range(len(docs))]
    return merge_rank_documents(docs, paths)
