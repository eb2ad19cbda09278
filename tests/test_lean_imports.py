"""ampkit's own processes (the program, its children) import TensorFlow without what training never uses
(ampkit.lean_imports): Keras's wrappers and visualization load on first use, a few optional imports are
refused; a library caller's process is untouched."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

from ampkit import lean_imports
from ampkit.isolation import run_isolated


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """An optional package, a module whose optional import of it is refused, and one whose is not."""
    (tmp_path / "ampkit_opt_pkg").mkdir()
    (tmp_path / "ampkit_opt_pkg" / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "ampkit_opt_pkg" / "sub.py").write_text("VALUE = 2\n")
    optional = ("try:\n    import ampkit_opt_pkg.sub\n    HAVE = True\nexcept ImportError as exc:\n"
                "    HAVE, WHY = False, str(exc)\n")
    (tmp_path / "ampkit_opt_user").mkdir()
    (tmp_path / "ampkit_opt_user" / "__init__.py").write_text("")
    (tmp_path / "ampkit_opt_user" / "feature.py").write_text(optional)
    (tmp_path / "ampkit_opt_other.py").write_text(optional)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(lean_imports.UNUSED, "ampkit_opt_pkg", ("ampkit_opt_user.",))
    finder = lean_imports.SkipUnused()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    yield
    for name in [m for m in sys.modules if m.startswith("ampkit_opt_")]:
        del sys.modules[name]


def test_only_the_listed_importer_is_refused_and_only_until_the_package_is_imported(fake_packages):
    import ampkit_opt_user.feature as refused

    assert refused.HAVE is False and "ampkit_opt_pkg" in refused.WHY and "ampkit_opt_user.feature" in refused.WHY
    assert "ampkit_opt_pkg" not in sys.modules
    import ampkit_opt_other as allowed  # any other importer gets the package

    assert allowed.HAVE is True and sys.modules["ampkit_opt_pkg.sub"].VALUE == 2
    del sys.modules["ampkit_opt_user.feature"]  # imported already: the listed importer gets it too now
    import ampkit_opt_user.feature as again

    assert again.HAVE is True


def test_a_whole_name_is_not_a_prefix():
    assert lean_imports._refused("keras.src.saving.file_editor", ("keras.src.saving.file_editor",))
    assert not lean_imports._refused("keras.src.saving.file_editor_v2", ("keras.src.saving.file_editor",))
    assert lean_imports._refused("tensorflow.lite.python.util", ("tensorflow.lite.",))
    assert not lean_imports._refused("tensorflow.literal", ("tensorflow.lite.",))


def test_find_spec_from_a_listed_importer_still_finds_the_package(fake_packages, tmp_path):
    """A probe (importlib.util.find_spec) says the truth; only the import itself is refused."""
    (tmp_path / "ampkit_opt_user" / "probe.py").write_text(
        "import importlib.util\nFOUND = importlib.util.find_spec('ampkit_opt_pkg') is not None\n")
    import ampkit_opt_user.probe as probe

    assert probe.FOUND is True


def test_a_lazy_module_runs_on_first_use_and_then_is_whole(tmp_path, monkeypatch):
    (tmp_path / "ampkit_lazy_pkg").mkdir()
    (tmp_path / "ampkit_lazy_pkg" / "__init__.py").write_text(
        "import sys\nsys.ampkit_lazy_ran = getattr(sys, 'ampkit_lazy_ran', 0) + 1\nVALUE = 41 + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(lean_imports, "LAZY", frozenset({"ampkit_lazy_pkg"}))
    monkeypatch.setattr(sys, "meta_path", [lean_imports.SkipUnused(), *sys.meta_path])
    monkeypatch.setattr(sys, "ampkit_lazy_ran", 0, raising=False)
    try:
        import ampkit_lazy_pkg

        assert sys.ampkit_lazy_ran == 0  # bound, not run
        assert ampkit_lazy_pkg.VALUE == 42 and sys.ampkit_lazy_ran == 1  # the first use runs it, once
        assert ampkit_lazy_pkg.VALUE == 42 and sys.ampkit_lazy_ran == 1
    finally:
        sys.modules.pop("ampkit_lazy_pkg", None)


def test_the_variable_turns_it_off_and_installing_twice_is_once(monkeypatch):
    import importlib

    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setenv("AMPKIT_LEAN_IMPORTS", "0")
    lean_imports.skip_unused_imports()
    assert not lean_imports._installed()
    monkeypatch.delenv("AMPKIT_LEAN_IMPORTS")
    lean_imports.skip_unused_imports()
    reloaded = importlib.reload(lean_imports)  # a reload makes a new class: still one finder
    reloaded.skip_unused_imports()
    assert sum(type(f).__name__ == "SkipUnused" for f in sys.meta_path) == 1


def test_a_library_callers_process_is_left_alone():
    import ampkit  # noqa: F401 - the library imported: nothing installed in the caller's import system

    assert not any(isinstance(f, lean_imports.SkipUnused) for f in sys.meta_path)


def test_the_program_installs_it_and_a_test_calling_main_does_not():
    code = textwrap.dedent("""
        import sys
        from ampkit import lean_imports
        from ampkit.cli.main import main
        main(["doctor", "--no-such-flag"])  # a library caller's main(argv): nothing installed
        print("LIBRARY", any(isinstance(f, lean_imports.SkipUnused) for f in sys.meta_path))
        sys.argv = ["ampkit", "doctor", "--no-such-flag"]
        main()
        print("PROGRAM", any(isinstance(f, lean_imports.SkipUnused) for f in sys.meta_path))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "LIBRARY False" in r.stdout and "PROGRAM True" in r.stdout, (r.stdout, r.stderr[-2000:])


#: what TensorFlow imports where installed, and a process of ampkit's does not until it is used
LEFT_OUT = ("jax", "IPython", "sklearn", "matplotlib")


def _tensorflow_in_a_child():
    import tensorflow as tf

    absent = sorted(name for name in LEFT_OUT if name not in sys.modules)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    model.compile("adam", "mse")
    loss = model.fit(tf.ones((4, 3)), tf.zeros((4, 2)), verbose=0).history["loss"][-1]
    import keras

    used = {}
    if importlib.util.find_spec("sklearn") is not None:  # a factory using Keras's scikit-learn wrapper gets it whole
        keras.wrappers.SKLearnClassifier(model=lambda X, y: model)  # refuses to be made without scikit-learn
        used["sklearn"] = "sklearn" in sys.modules
    if importlib.util.find_spec("matplotlib") is not None:
        used["matplotlib"] = callable(keras.visualization.plot_image_gallery)
    for name in LEFT_OUT:  # the user's code imports each installed one as usual afterwards
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    return absent, float(loss), used


@pytest.mark.tensorflow
def test_an_ampkit_child_imports_tensorflow_without_the_unused_packages_and_trains():
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    installed = sorted(n for n in LEFT_OUT if importlib.util.find_spec(n) is not None)
    absent, loss, used = run_isolated(_tensorflow_in_a_child, what="a Keras fit", timeout=600)
    assert set(installed) <= set(absent), f"imported by TensorFlow in ampkit's child: {set(installed) - set(absent)}"
    assert loss == loss and loss > 0
    assert all(used.values()) and set(used) == set(installed) & {"sklearn", "matplotlib"}, used
