"""Parity's seeds x modes grid under torchrun: the runs spread over the ranks, the results to rank 0."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import asdict
from datetime import timedelta

from ...errors import UsageError
from ...parity.report import RunRecord

TIMEOUT_ENV = "AMPKIT_PARITY_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0


def timeout_s() -> float:
    """How long a silent rank is waited for (``AMPKIT_PARITY_TIMEOUT``, seconds)."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{TIMEOUT_ENV}={text!r} must be a positive number of seconds (how long a silent rank "
                         "is waited for)")
    return value


def join(device: str, target_of) -> ParityGroup | None:
    """Under torchrun (WORLD_SIZE > 1): join the group on this rank's device (``cuda:LOCAL_RANK`` for
    ``auto``/``cuda``, a named ``cuda:N`` as it is, else the CPU); None for one process."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return None
    import torch
    import torch.distributed as dist

    timeout = timeout_s()
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    if device.startswith("cuda:"):  # named: every rank there (several ranks may share a GPU)
        target = target_of(device)
        torch.cuda.set_device(torch.device(target.device))
    elif device in ("auto", "cuda") and torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise UsageError(f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} CUDA device(s): "
                             "start at most one process per GPU (--nproc-per-node), or name one with --device cuda:N")
        torch.cuda.set_device(local_rank)
        target = target_of(f"cuda:{local_rank}")
    else:
        target = target_of("cpu" if device == "auto" else device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if target.accelerator else "gloo", timeout=timedelta(seconds=timeout))
    return ParityGroup(target, dist.get_rank(), dist.get_world_size(), timeout)


class ParityGroup:
    """This rank's place in the group and its line to the store."""

    def __init__(self, target, rank: int, world: int, timeout: float):
        self.target, self.rank, self.world, self.timeout = target, rank, world, timeout
        run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
        self.prefix = f"ampkit/parity/{run_id}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        self.store = self._client()
        self.beat_s = max(0.2, min(5.0, timeout / 5))
        self._stop = threading.Event()
        self.store.set(f"hb/{rank}", "0")
        self._beat = threading.Thread(target=self._heartbeat, name="ampkit-parity-heartbeat", daemon=True)
        self._beat.start()

    def _client(self):
        from torch.distributed import PrefixStore, TCPStore

        store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=self.timeout), wait_for_workers=False)
        return PrefixStore(self.prefix, store)

    def _heartbeat(self) -> None:
        try:
            store = self._client()
        except Exception:
            return
        n = 0
        while not self._stop.wait(self.beat_s):
            n += 1
            try:
                store.set(f"hb/{self.rank}", str(n))
            except Exception:  # the store's host ended: the main thread finds out on its next post
                return

    def _set(self, key: str, value: str) -> None:
        try:
            self.store.set(key, value)
        except Exception as exc:
            raise UsageError(f"rank {self.rank} of {self.world}: lost the group's store (rank 0 or the launcher "
                             f"ended?): {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}") \
                from None

    # ---------------------------------------------------------------- every rank
    def started(self, mode: str, seed: int) -> None:
        self._set(f"cur/{self.rank}", f"{mode}/{seed}")

    def post(self, rec: RunRecord) -> None:
        rec.rank = self.rank
        if self.rank != 0:
            self._set(f"run/{rec.mode}/{rec.seed}", json.dumps(asdict(rec)))

    def stopped(self) -> None:
        """This rank was stopped (Ctrl-C, SIGTERM from the launcher): not a death, its run is not a failure."""
        try:
            self.store.set(f"stop/{self.rank}", "1")
        except Exception:
            pass

    def close(self) -> None:
        self._stop.set()
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass

    # ---------------------------------------------------------------- rank 0
    def _get(self, key: str) -> str | None:
        try:
            return self.store.get(key).decode() if self.store.check([key]) else None
        except Exception:
            return None

    def _sweep(self, pending: dict, got: dict) -> None:
        for key in list(pending):
            text = self._get(f"run/{key[0]}/{key[1]}")
            if text is not None:
                got[key] = RunRecord.from_dict(json.loads(text))
                del pending[key]

    def collect(self, own: list[RunRecord], owners: dict, interrupted: bool, say=None) -> tuple[list[RunRecord], bool]:
        """Rank 0: its own runs and every other rank's, in the order of ``owners`` ((mode, seed) ->
        rank). A silent rank's runs are failed rows; when this rank is interrupted (the launcher
        stopped the group), the others get a few seconds to post, then what is held is returned."""
        got = {(r.mode, r.seed): r for r in own}
        pending = {key: rank for key, rank in owners.items() if rank != self.rank and key not in got}
        beats: dict[int, tuple[str | None, float]] = {}
        waiting_said = False
        try:
            while pending and not interrupted:
                self._sweep(pending, got)
                now = time.monotonic()
                for rank in sorted(set(pending.values())):
                    beat = self._get(f"hb/{rank}")
                    last = beats.get(rank)
                    if last is None or last[0] != beat:
                        beats[rank] = (beat, now)
                    elif now - last[1] > self.timeout:
                        self._fail_rank(rank, pending, got, f"stopped answering (no heartbeat for {self.timeout:g} s: "
                                                            "killed, crashed, or its node lost)")
                if pending and not waiting_said and say:
                    say(f"rank {self.rank}: waiting for {len(pending)} run(s) of rank(s) "
                        f"{sorted(set(pending.values()))}")
                    waiting_said = True
                time.sleep(0.2)
        except KeyboardInterrupt:
            interrupted = True
        if pending:  # interrupted: a few seconds for the others to post what they finished
            end = time.monotonic() + min(5.0, self.timeout)
            while pending and time.monotonic() < end:
                self._sweep(pending, got)
                time.sleep(0.2)
            for rank in sorted(set(pending.values())):
                if self._get(f"stop/{rank}") is None:  # it did not say it was stopped: it died in its run
                    current = self._get(f"cur/{rank}")
                    for key in [k for k, r in pending.items() if r == rank and f"{k[0]}/{k[1]}" == current]:
                        got[key] = RunRecord(key[0], key[1], [], [], [], 0, 0.0, rank=rank,
                                             error=f"rank {rank} ended during this run without a result "
                                                   "(killed or crashed)")
        return [got[k] for k in owners if k in got], interrupted

    def _fail_rank(self, rank: int, pending: dict, got: dict, why: str) -> None:
        current = self._get(f"cur/{rank}")
        for key in [k for k, r in pending.items() if r == rank]:
            during = f"{key[0]}/{key[1]}" == current
            got[key] = RunRecord(key[0], key[1], [], [], [], 0, 0.0, rank=rank,
                                 error=f"rank {rank} {why}" + ("" if during else "; this run was not reached"))
            del pending[key]
