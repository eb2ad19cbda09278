"""Arguments shared by several subcommands."""

from __future__ import annotations


def add_device(p) -> None:
    p.add_argument("--device", default="auto", metavar="DEV",
                   help="auto (first CUDA device, else CPU), cpu, cuda or cuda:N (default: auto)")


def add_threads(p) -> None:
    """--threads N: the CPU threads doctor and bench time with (ampkit.threads; checked by the config)."""
    p.add_argument("--threads", default=None, metavar="N",
                   help="CPU threads to time with, 1 to the logical CPUs (default: 1 on a CPU, for doctor and bench "
                        "alike; a GPU run keeps the framework's count); the output and JSON say the count")


def add_json(p) -> None:
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write the JSON document to PATH; '-' writes it alone to stdout (human output to stderr)")


def add_framework(p, *, allow_all: bool = False) -> None:
    choices = "auto|torch|tensorflow" + ("|all" if allow_all else "")
    p.add_argument("--framework", default="auto", metavar=choices.upper(),
                   help=f"{choices} (default: auto = torch when it can be imported, else tensorflow)")


def add_run_flags(p) -> None:
    """--framework, --device and --json: where a command runs and where its document goes."""
    add_framework(p)
    add_device(p)
    add_json(p)


def add_sizes(p) -> None:
    """--seq-len / --image-size: the input size of a built-in workload (see ampkit.workload_sizes)."""
    p.add_argument("--seq-len", type=int, default=None, metavar="N",
                   help="sequence length of a built-in sequence workload (bert-base: 128, gpt2: 512 by default)")
    p.add_argument("--image-size", type=int, default=None, metavar="N",
                   help="side of the square images of a built-in image workload (cnn: 32, resnet50/vit_b_16: 224)")


def progress_printer(con):
    """A progress callback that writes dim status lines to the human console."""
    def say(msg: str) -> None:
        con.print(f"[dim]… {msg}[/]")
    return say


def add_timeout(p, what: str) -> None:
    p.add_argument("--timeout", type=float, default=1800.0, metavar="SECONDS",
                   help=f"stop {what} after SECONDS and report it (default 1800)")


class ProgressLines:
    """Progress as plain lines for a stream that is not a terminal (a log file, a pipe, CI), where a
    live bar would print nothing useful: one line when a mode starts, after its first step, when its
    warm-up ends, at each quarter of its timed steps, at least every ``every_s`` seconds while steps
    finish, and when the last step is done. Written to ``stream`` (stderr: stdout may carry the JSON
    document) and flushed at once, so a log shows where a long run is."""

    def __init__(self, command: str, warmup: int, stream=None, every_s: float = 30.0, clock=None):
        import sys
        import time

        self.command = command
        self.warmup = warmup
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.clock = clock or time.monotonic
        self._state: dict[str, dict] = {}

    def _say(self, text: str) -> None:
        try:
            self.stream.write(f"ampkit {self.command}: {text}\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream must not stop the work
            pass

    def __call__(self, msg: dict) -> None:
        mode, kind = msg.get("mode"), msg.get("kind")
        now = self.clock()
        if kind == "start":
            self._state[mode] = {"t0": now, "last": now, "quarters": set()}
            repeat = f" (repeat {msg['repeat']} of {msg['repeats']})" if (msg.get("repeats") or 1) > 1 else ""
            if (msg.get("sets") or 1) > 1:  # bench's rounds split over sets of processes (ampkit.bench.rounds)
                repeat += f" (process set {msg['set']} of {msg['sets']})"
            steps = msg.get("steps")
            plan = f": {self.warmup} warm-up + {steps} timed steps" if steps is not None else ""
            inter = ", timed in rounds interleaved with the other modes" if msg.get("interleaved") else ""
            self._say(f"{mode}{repeat}: starting in a fresh process{plan}{inter}")
            return
        st = self._state.setdefault(mode, {"t0": now, "last": now, "quarters": set()})
        if kind == "search":
            self._say(f"{mode}: trying batch size {msg.get('done')}")
            st["last"] = now
            return
        if kind != "step":
            return
        done, total = int(msg.get("done") or 0), int(msg.get("total") or 0)
        timed_total = max(0, total - self.warmup)
        timed_done = done - self.warmup
        elapsed = now - st["t0"]
        quarter = (timed_done * 4 // timed_total) if timed_total and timed_done > 0 else None
        reason = None
        if done >= total:
            reason = f"all {total} steps done"
        elif done == 1:
            reason = f"step 1/{total} done" + (" (warm-up)" if self.warmup else "")
        elif self.warmup and done == self.warmup:
            reason = f"warm-up done ({self.warmup} steps)"
        elif quarter is not None and quarter not in st["quarters"] and quarter >= 1:
            reason = f"timed step {timed_done}/{timed_total}"
        elif now - st["last"] >= self.every_s:
            reason = f"step {done}/{total}"
        if quarter is not None:
            st["quarters"].update(range(1, quarter + 1))
        if reason:
            st["last"] = now
            self._say(f"{mode}: {reason} ({elapsed:.1f} s)")
