"""The backend registry: which framework runs, and its backend (:class:`~ampkit.backends.base.Backend`)."""

from __future__ import annotations

import importlib
import importlib.util

from .errors import UsageError

FRAMEWORKS = ("torch", "tensorflow")
AUTO = "auto"
INSTALL = {"torch": "pip install 'ampkit[torch]'", "tensorflow": "pip install 'ampkit[tensorflow]'"}
_CLASSES = {"torch": "ampkit.backends.torch.backend:TorchBackend",
            "tensorflow": "ampkit.backends.tensorflow.backend:TensorFlowBackend"}
#: backends added by register_backend (name -> "module:Class"), beside the two built in
_REGISTERED: dict[str, str] = {}
_ALIASES = {"torch": "torch", "pytorch": "torch", "tensorflow": "tensorflow", "tf": "tensorflow",
            "keras": "tensorflow", AUTO: AUTO}

__all__ = ["FRAMEWORKS", "auto_has_choice", "backend_spec", "framework_of", "get_backend", "load_backend",
           "made_by", "model_framework", "parse_framework", "register_backend", "resolve_framework"]


def parse_framework(name: str | None, *, allow_all: bool = False) -> str:
    """The canonical framework name (``torch``, ``tensorflow``, ``auto``, and ``all`` where allowed);
    anything else is one :class:`~ampkit.errors.UsageError` (a ValueError) listing the names."""
    if name is not None and not isinstance(name, str):
        raise UsageError(f"framework must be a name such as 'torch' or 'tensorflow'; received {name!r}")
    key = (name or AUTO).strip().lower()
    if allow_all and key == "all":
        return "all"
    if key in _REGISTERED:
        return key
    if key not in _ALIASES:
        allowed = ", ".join(FRAMEWORKS + tuple(_REGISTERED) + (AUTO,) + (("all",) if allow_all else ()))
        raise UsageError(f"unknown framework {name!r}; choose from: {allowed}")
    return _ALIASES[key]


def _torch_importable() -> bool:
    # a real import, not find_spec: a broken or stubbed torch must count as absent
    try:
        import torch  # noqa: F401
    except Exception:
        return False
    return True


def _tensorflow_present() -> bool:
    return importlib.util.find_spec("tensorflow") is not None and importlib.util.find_spec("keras") is not None


def _require(framework: str, torch_found: bool) -> None:
    """The usage line for ``framework`` (torch, tensorflow or auto) where it is not installed, given
    whether torch was found (imported, or only located where the import is left to a child)."""
    if framework == "torch" and not torch_found:
        raise UsageError(f"--framework torch needs PyTorch: {INSTALL['torch']}")
    if framework == "tensorflow" and not _tensorflow_present():
        raise UsageError(f"--framework tensorflow needs TensorFlow and Keras 3: {INSTALL['tensorflow']}")
    if framework == AUTO and not torch_found and not _tensorflow_present():
        raise UsageError(f"neither PyTorch nor TensorFlow is installed: {INSTALL['torch']} or {INSTALL['tensorflow']}")


def resolve_framework(name: str | None) -> str:
    """``auto`` -> torch when torch can be imported, else tensorflow when it is installed."""
    framework = parse_framework(name)
    if framework != AUTO:
        return framework
    if _torch_importable():
        return "torch"
    _require(AUTO, torch_found=False)
    return "tensorflow"


#: where a class is defined -> its framework (Keras first: a Keras 3 model on Keras's torch backend is a
#: torch.nn.Module too, and only ampkit's Keras engine audits it)
_HOMES = (("keras", "tensorflow"), ("tf_keras", "tensorflow"), ("tensorflow", "tensorflow"),
          ("ampkit.backends.tensorflow", "tensorflow"), ("torch", "torch"), ("ampkit.backends.torch", "torch"))


def _home(obj) -> str | None:
    """The framework whose classes ``obj`` (an object or a class) is made of, from the modules they
    are defined in (nothing is imported)."""
    classes = obj.__mro__ if isinstance(obj, type) else type(obj).__mro__
    modules = [c.__module__ or "" for c in classes]
    for prefix, framework in _HOMES:
        if any(m == prefix or m.startswith(prefix + ".") for m in modules):
            return framework
    return None


#: the modules of the data-set classes (torch ``Dataset``/``DataLoader`` and their subclasses, ``tf.data``)
_DATA_HOMES = ("torch.utils.data", "tensorflow.python.data")


def is_data_set(obj) -> bool:
    """A torch ``Dataset`` or ``DataLoader`` (or a subclass) or a ``tf.data.Dataset``: what a data
    factory may return for a part, told from the modules of its classes (nothing is imported)."""
    modules = [c.__module__ or "" for c in type(obj).__mro__]
    return any(m == home or m.startswith(home + ".") for m in modules for home in _DATA_HOMES)


def framework_of(*objects) -> str | None:
    """The framework of the first object that tells (:func:`_home`) -- a model or its class, an
    ``ampkit.Workload``, a data set or loader, a tensor -- looking into ``(inputs, targets)`` pairs
    and ``(train, validation)`` pairs of them; None when none tells (NumPy arrays, plain Python)."""
    for obj in objects:
        found = framework_of(*obj[:4]) if isinstance(obj, (tuple, list)) else _home(obj)
        if found:
            return found
    return None


def made_by(factory, spec: str) -> str | None:
    """The framework of what a model ``factory`` returns, for ``framework="auto"``: the factory's own
    when it tells (a model class, or a model passed where a factory belongs: not called), else
    what one call returns; None when that call fails (the runs that call it again say so) or
    nothing tells."""
    from .factory import call_user

    if framework_of(factory):
        return framework_of(factory)
    try:
        return framework_of(call_user(factory, spec))
    except UsageError:  # the factory failed (FactoryFailed) or refused: its runs report it in their own words
        return None


def factory_framework(spec: str) -> str | None:
    """In a child (:func:`~ampkit.isolation.run_isolated`): the framework of what MODULE:FACTORY
    returns (bench's ``framework="auto"`` with ``--model``)."""
    from .factory import call_factory

    return framework_of(call_factory(spec))


def auto_has_choice() -> bool:
    """Whether ``auto`` has two frameworks to choose from (then the library asks the model which)."""
    return _tensorflow_present() and _torch_importable()


def model_framework(model, batch=None, framework: str | None = AUTO) -> str:
    """The framework for ``framework="auto"`` in the library's audit: the model's own (a
    ``torch.nn.Module`` or ``ampkit.Workload``: torch; a Keras model or its class: tensorflow); for a
    plain callable that builds the model, the batch says (torch tensors: torch; anything else: Keras,
    whose audit takes a builder); else :func:`resolve_framework`'s choice. A named ``framework`` is
    parsed, and one that is not the model's own is a UsageError (a torch module with ``"tensorflow"``)."""
    framework = parse_framework(framework)
    found = framework_of(model)
    if framework != AUTO:
        if found is not None and framework in FRAMEWORKS and found != framework:
            raise UsageError(f"framework={framework!r} runs {framework} models; received a {found} model "
                             f"({type(model).__name__}): pass framework='auto' (the model's own) or {found!r}")
        return framework
    if found is None and callable(model) and batch is not None:
        found = "torch" if framework_of(batch) == "torch" else "tensorflow"
    return found or resolve_framework(AUTO)


def register_backend(name: str, spec: str) -> None:
    """Make ``--framework NAME`` (and ``framework=NAME``) use the backend class at ``spec``
    (``"package.module:Class"``, importable in child processes too: they load it by that spec)."""
    if ":" not in spec:
        raise ValueError(f"a backend spec is 'module:Class'; received {spec!r}")
    _REGISTERED[name.strip().lower()] = spec


def load_backend(spec: str):
    """The backend at ``spec`` (``"module:Class"``): how a child process gets its parent's backend."""
    module, _, cls = spec.partition(":")
    return getattr(importlib.import_module(module), cls)()


def backend_spec(backend) -> str:
    """``"module:Class"`` of a backend object, for :func:`load_backend` in a child process."""
    return f"{type(backend).__module__}:{type(backend).__qualname__}"


def child_backend(framework: str | None = AUTO) -> str:
    """What a child process loads (:func:`child_spec_backend`) for ``framework``, checked here without
    importing it: the framework's name for torch, TensorFlow and ``auto`` (the child resolves and
    imports it: a command whose work all runs in its child never loads torch in the parent), a
    registered backend's ``module:Class``. A framework that is not installed is the usage line
    :func:`get_backend` gives; one installed but broken is told by the child's :func:`get_backend`."""
    framework = parse_framework(framework)
    if framework in _REGISTERED:
        return _REGISTERED[framework]
    _require(framework, torch_found=importlib.util.find_spec("torch") is not None)
    return framework


def child_spec_backend(spec: str):
    """In the child: the backend :func:`child_backend` (or :func:`backend_spec`) named."""
    return load_backend(spec) if ":" in spec else get_backend(spec)


def get_backend(framework: str | None = AUTO):
    """The backend for ``framework`` (``auto`` resolved); a missing framework is a usage error."""
    framework = resolve_framework(framework)
    if framework in _REGISTERED:
        return load_backend(_REGISTERED[framework])
    _require(framework, torch_found=framework != "torch" or _torch_importable())  # torch imported only when asked for
    return load_backend(_CLASSES[framework])
