"""Replaying one audited step: the same random numbers for every pass, buffers put back between them."""

from __future__ import annotations

import collections
import contextlib

import torch


@contextlib.contextmanager
def same_randomness(device, seed: int):
    """Every pass of a step draws the same random numbers (dropout masks, anything a model draws):
    the global generators are seeded alike inside a fork, so the user's random stream is untouched."""
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def restore(saved) -> None:
    """Copy each saved value back into its tensor: ``saved`` is ``[(tensor, value), ...]``."""
    with torch.no_grad():
        for t, value in saved:
            t.copy_(value)


def snapshot(model, *, parameters: bool = False) -> list:
    """Copies of the model's buffers (and its parameters, with ``parameters``), for :func:`restore`:
    ``[(tensor, copy), ...]``. A pass that updates running statistics is put back with them."""
    tensors = [*model.parameters(), *model.buffers()] if parameters else list(model.buffers())
    return [(t, t.detach().clone()) for t in tensors]


class ModelState:
    """The caller's model as it came, given back by :meth:`restore`: its parameters, buffers, ``.grad``
    and train/eval mode (an audit trains the model it was given, on copies' worth of memory)."""

    def __init__(self, model) -> None:
        self.model, self.training = model, model.training
        self.saved = snapshot(model, parameters=True)
        self.grads = [(p, p.grad) for p in model.parameters()]

    def restore(self) -> None:
        self.model.train(self.training)
        restore(self.saved)
        for p, g in self.grads:
            p.grad = g


class StepCalls:
    """The outermost training forwards of one step, held by reference until :meth:`clear`: each call's
    module, arguments, autocast state and random-number states, for a replay of exactly that forward
    (:meth:`replay`). ``modules``: where an outermost call can begin (the model; a trainer that calls
    the model's children from its own code -- Lightning's ``training_step`` -- needs them too). A call
    inside another is not held; nothing is copied (the trainer holds these inputs for the step anyway);
    ``maxlen``: forwards with gradients that no optimizer step follows cannot pile up; ``training_only``:
    forwards in eval mode are not held."""

    def __init__(self, modules, maxlen: int = 8, *, training_only: bool = True) -> None:
        self.training_only = training_only
        self.calls: collections.deque = collections.deque(maxlen=maxlen)
        self._depth = 0
        self._handles = []
        for m in modules:
            self._handles.append(m.register_forward_pre_hook(self._pre(m), with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._post, always_call=True))
        self.replaying = False

    def _pre(self, module):
        def hook(_module, args, kwargs) -> None:
            self._depth += 1
            if self._depth > 1 or self.replaying or not torch.is_grad_enabled() or (self.training_only and not module.training):
                return
            dev = next((t.device for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor)),
                       next((p.device for p in module.parameters()), torch.device("cpu")))
            on = torch.is_autocast_enabled(dev.type)
            rng = (torch.get_rng_state(), torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None)
            self.calls.append((module, args, kwargs, dev, on, torch.get_autocast_dtype(dev.type) if on else None, rng))
        return hook

    def _post(self, *_a) -> None:
        self._depth = max(0, self._depth - 1)

    def replay(self, call) -> None:
        """One held forward again, as it ran: the same autocast and random numbers (the caller's
        generators are left as they were), under whatever grad mode the caller set."""
        module, args, kwargs, dev, on, dtype, (cpu, cuda) = call
        self.replaying = True
        try:
            with torch.random.fork_rng(devices=[dev] if cuda is not None else []):
                torch.set_rng_state(cpu)
                if cuda is not None:
                    torch.cuda.set_rng_state(cuda, dev)
                with torch.autocast(dev.type, dtype=dtype, enabled=on):
                    module(*args, **kwargs)
        finally:
            self.replaying = False

    def clear(self) -> None:
        self.calls.clear()

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.calls.clear()
