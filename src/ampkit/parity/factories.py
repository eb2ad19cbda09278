"""A caller's ``--model MODULE:FACTORY --data MODULE:FACTORY`` (and the library's ``model=``/``data=``
strings): loaded, and checked in a child process before any training (:func:`check_isolated`), as
early as each check allows (:func:`check_early`: before the framework loads)."""

from __future__ import annotations

from ..errors import UsageError
from ..factory import call_user, load_factory
from ..isolation import run_isolated
from .config import ParityConfig
from .ops import DataSets, ParityData

#: epochs per run for a caller's data when neither --epochs nor --steps is given
USER_EPOCHS = 3


def user_data(config: ParityConfig, checked: bool = False) -> ParityData:
    """``--model MODULE:FACTORY --data MODULE:FACTORY``: the model factory (called per run, after
    seeding) and what the data factory returns, ``(train, validation)``; one usage line for a
    factory that cannot be imported or called or returns something else (``checked``: the isolated
    check already ran, :func:`check_early`)."""
    if not checked:
        check_isolated(config.model, config.data, config.timeout)
    make_model = load_factory(config.model, flag="--model")
    make_data = load_factory(config.data, flag="--data")
    sizes = {k: v for k, v in (("lr", config.lr), ("batch_size", config.batch_size)) if v is not None}
    return ParityData(name=config.model.split(":")[0], model=make_model, epochs=USER_EPOCHS, model_spec=config.model,
                      source=DataSets.from_factory(make_data, config.data), **sizes)


#: what a model factory must return, in each framework's words (a plain value is refused in the check's child)
EXPECTED_MODEL = {"torch": "a torch.nn.Module or an ampkit.Workload", "tensorflow": "a keras.Model (Keras 3)"}


def check_early(config: ParityConfig, backend) -> bool:
    """The user's factories checked before the framework loads (issue #49: a mistyped module, a
    factory returning a string or an empty data set took a torch import, 20 s on a busy machine):
    a module that cannot be found is one line here, in a fraction of a second; then, unless fp8 is
    asked for (a broken fp8 install is known only by importing it, with the framework, and is said
    before any factory is called), the factories are imported and called in a child. Returns
    whether that child ran (then :func:`user_data` need not run it again)."""
    import importlib.util

    from ..factory import check_findable

    if not (backend in ("auto", "torch", "tensorflow") or getattr(backend, "name", None) in ("torch", "tensorflow")):
        return False  # a registered backend says in its own words what it takes, first
    check_findable(config.data, "--data")
    check_findable(config.model, "--model")
    modes = set(config.modes or ()) | ({config.plan["default"]} if config.plan else set())
    if "fp8" in modes or "auto" in modes:  # auto may resolve to fp8 where fp8 runs
        return False
    if not isinstance(backend, str):
        name = backend.name
    elif backend == "auto":  # as auto resolves, without importing torch to tell (find_spec, not import)
        name = "torch" if importlib.util.find_spec("torch") else "tensorflow"
    else:
        name = backend
    check_isolated(config.model, config.data, config.timeout, expect=EXPECTED_MODEL.get(name))
    return True


def check_isolated(model_spec: str | None, data_spec: str | None, timeout: float | None,
                   flags: tuple[str, str] = ("--model", "--data"), expect: str | None = None) -> None:
    """The ``MODULE:FACTORY`` strings among ``model_spec``/``data_spec`` (None: not a string, not
    checked) imported and called once in a child first: a factory that exits, aborts, hangs or
    raises KeyboardInterrupt is one usage line naming it, never the end of the caller's process (the
    CLI's and the library's ``ampkit.parity(model="m:f")``; bench and audit isolate theirs the same way)."""
    if model_spec is None and data_spec is None:
        return
    said = " then ".join(f"{flag} {spec}()" for flag, spec in ((flags[1], data_spec), (flags[0], model_spec)) if spec)
    run_isolated(check_factories, model_spec, data_spec, flags, expect, timeout=timeout,
                 what=f"calling {said} (in a child process)")


def check_factories(model_spec: str | None, data_spec: str | None, flags: tuple[str, str] = ("--model", "--data"),
                    expect: str | None = None) -> None:
    """In a child (:func:`~ampkit.isolation.run_isolated`): import both factories, then call each
    once (a None spec is skipped); what fails is a usage line naming the factory. What needs no
    framework is checked here too: the data factory returns two parts, neither an empty data set
    (of a known length); with ``expect`` (the framework's words), a model factory returning a plain
    value (a string, a number, None) is refused."""
    from ..factory import plain_value_returned

    factories = [(spec, load_factory(spec, flag=flag)) for spec, flag in ((data_spec, flags[1]), (model_spec, flags[0]))
                 if spec is not None]  # both imported before either is called: a missing one is said first
    for spec, factory in factories:
        try:
            if spec == data_spec:
                _check_parts(DataSets.from_factory(factory, spec), spec)
            else:
                made = call_user(factory, spec)  # an exception or sys.exit: call_user's one line (FactoryFailed)
                if expect and plain_value_returned(made):
                    raise UsageError(f"{spec}() returned a {type(made).__name__}; expected {expect}")
        except KeyboardInterrupt:  # raised by the factory itself: the child ignores SIGINT, the parent has Ctrl-C
            raise UsageError(f"calling {spec}() failed: it raised KeyboardInterrupt") from None


def _check_parts(sets: DataSets, spec: str) -> None:
    """An empty part, told by its length where it has one (a Dataset, a DataLoader's dataset, an
    ``(inputs, targets)`` pair, a tf.data pipeline of known cardinality): the backend's words."""
    for part, obj in (("train", sets.train), ("validation", sets.test)):
        inner = obj[0] if isinstance(obj, (tuple, list)) and len(obj) == 2 else getattr(obj, "dataset", obj)
        try:
            n = len(inner)
        except Exception:  # no length (an iterable data set, an unknown cardinality): the backend reads it
            continue
        if n == 0:
            raise UsageError(f"{spec}: the {part} data set is empty")
