"""Keras 3 on its other backends (``KERAS_BACKEND=torch`` or ``jax``): what ``ampkit.keras`` does there."""

from __future__ import annotations

import json
import os
import sys

from ....errors import UsageError

TENSORFLOW = "tensorflow"


def configured_backend() -> str:
    """The backend Keras 3 runs on (or will, once imported): Keras's own answer when it is imported,
    else its environment variable, else its config file, else ``tensorflow``."""
    if "keras" in sys.modules:
        try:
            return sys.modules["keras"].backend.backend()
        except Exception:  # a half-imported keras: read what it would read
            pass
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"].strip()
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    for folder in (home, os.path.join("/tmp", ".keras")):
        try:
            with open(os.path.join(folder, "keras.json")) as fh:
                backend = json.load(fh).get("backend")
            if backend:
                return str(backend)
        except (OSError, ValueError, AttributeError):
            continue
    return TENSORFLOW


#: the backends Keras 3 itself accepts for KERAS_BACKEND
KERAS_BACKENDS = ("tensorflow", "jax", "torch", "numpy", "openvino")


def refuse_cli_backend() -> None:
    """The CLI's ``--framework tensorflow`` needs Keras on TensorFlow: under another Keras backend,
    one line that says so and what works, before anything is imported (never a segfault)."""
    backend = configured_backend()
    if backend == TENSORFLOW:
        return
    if backend not in KERAS_BACKENDS:  # a typo is not a backend ampkit.keras "works on"
        raise UsageError(f"Keras is set to the backend {backend!r} (KERAS_BACKEND or keras.json), which Keras does not "
                         f"have; valid backends: {', '.join(KERAS_BACKENDS)} (--framework tensorflow needs "
                         "KERAS_BACKEND=tensorflow)")
    raise UsageError(f"--framework tensorflow runs Keras 3 on TensorFlow, but Keras is set to the {backend!r} "
                     f"backend (KERAS_BACKEND or keras.json); run it with KERAS_BACKEND=tensorflow. "
                     f"ampkit.keras (scope, optimizer, fit, train_step) works on the {backend} backend in your own code"
                     + ("; --framework torch measures PyTorch itself" if backend == "torch" else ""))


# ------------------------------------------------------------------------------------- modes here
def _gpu_capability(backend: str) -> tuple[int, int] | None:
    """(major, minor) of the first GPU the backend sees, None on a CPU (JAX only: the torch backend's
    GPUs are not asked, see :func:`mode_support`)."""
    if backend != "jax":
        return None
    import jax

    for dev in jax.devices():
        cc = getattr(dev, "compute_capability", None)
        if dev.platform == "gpu" and cc:
            major, minor = str(cc).split(".")[:2]
            return int(major), int(minor)
    return None


def _on_gpu(backend: str) -> bool:
    import keras

    try:
        return any(not d.lower().startswith("cpu") for d in keras.distribution.list_devices())
    except Exception:  # pragma: no cover - a backend without the distribution API
        return False


def mode_support(mode: str, backend: str) -> tuple[bool, str]:
    """Whether ``mode`` runs through Keras's ``backend`` here (not TensorFlow)."""
    from ....capability import gpu_shortfall
    from ....cpu import cpu_mode_support
    from ....precision import TRAINING_MODES, get_precision

    if mode == "tf32":
        return False, (f"ampkit.keras sets TF32 through TensorFlow only; on the {backend} backend use fp32, fp16 or bf16 "
                       "(and the backend's own TF32 switch)")
    if mode not in TRAINING_MODES:
        return False, "fp8 is not offered through Keras policies"
    if not _on_gpu(backend):
        answer = cpu_mode_support(mode, f"Keras {get_precision(mode).keras_policy} policy on the {backend} backend, CPU:")
        return answer if answer is not None else (False, f"unknown mode {mode!r}")
    cc = _gpu_capability(backend)
    if cc is None:
        return True, f"Keras {backend} backend on a GPU (its compute capability not checked by ampkit.keras)"
    short = gpu_shortfall(mode, cc, "this GPU")
    return (False, short) if short else (True, f"GPU with compute capability {cc[0]}.{cc[1]} ({backend} backend)")


def resolve_auto(backend: str) -> tuple[str, str]:
    """``auto`` for Keras on ``backend``: the CPU's instructions (labelled as the guess it is: the
    doctor measures TensorFlow only), a JAX GPU's compute capability; on a torch-backend GPU a
    one-line refusal that names the modes to choose from."""
    from ....cpu import auto_for_cpu, auto_for_gpu

    if not _on_gpu(backend):
        return auto_for_cpu()
    cc = _gpu_capability(backend)
    if cc is None:
        raise UsageError(f"MixedPrecision('auto') cannot read the GPU's compute capability on Keras's {backend} backend; "
                         "name the mode: 'bf16' (compute capability >= 8.0) or 'fp16'")
    return auto_for_gpu(cc[0], cc[1], f"the GPU ({backend} backend)")


# ------------------------------------------------------------------------------------- custom loop
def train_step(backend: str, model, optimizer, x, y, loss_fn, scale_loss):
    """One custom-loop step on the torch or JAX backend: scale the loss (``scale_loss``), differentiate,
    ``optimizer.apply`` (a LossScaleOptimizer unscales, skips a non-finite step and updates its scale).
    Returns the unscaled loss."""
    if backend == "torch":
        return _torch_step(model, optimizer, x, y, loss_fn, scale_loss)
    if backend == "jax":
        return _jax_step(model, optimizer, x, y, loss_fn, scale_loss)
    raise UsageError(f"MixedPrecision.train_step supports Keras's tensorflow, torch and jax backends; this Keras runs "
                     f"on {backend!r}: use model.fit with mp.optimizer(...) there")


def _torch_step(model, optimizer, x, y, loss_fn, scale_loss):
    from keras.src.utils.torch_utils import no_grad  # torch.no_grad, reached through Keras's backend

    pred = model(x, training=True)
    model.zero_grad()
    loss = loss_fn(y, pred)
    scale_loss(loss).backward()
    variables = list(model.trainable_variables)
    grads = [v.value.grad for v in variables]
    no_grad(optimizer.apply)(grads, variables)
    return loss.detach()


def _jax_step(model, optimizer, x, y, loss_fn, scale_loss):
    import jax

    trainable = [v.value for v in model.trainable_variables]
    frozen = [v.value for v in model.non_trainable_variables]

    def scaled_loss(trainable):
        pred, new_frozen = model.stateless_call(trainable, frozen, x, training=True)
        loss = loss_fn(y, pred)
        return scale_loss(loss), (loss, new_frozen)

    (_, (loss, new_frozen)), grads = jax.value_and_grad(scaled_loss, has_aux=True)(trainable)
    # JAX's way: the optimizer's stateless apply (a stateful one inside its lax.cond leaks tracers)
    new_trainable, new_opt = optimizer.stateless_apply([v.value for v in optimizer.variables], grads, trainable)
    for variables, values in ((model.trainable_variables, new_trainable), (optimizer.variables, new_opt),
                              (model.non_trainable_variables, new_frozen)):
        for var, value in zip(variables, values):
            var.assign(value)
    return loss
