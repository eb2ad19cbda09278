"""User modules that fail the ways real ones do (written into a test's working directory)."""

TORCH_MODELS = '''
import ctypes
import os
import time

import torch
import torch.nn as nn


def bare():
    return nn.Sequential(nn.Flatten(), nn.Linear(8, 4))


def printing():
    print("hello from the user's factory")
    model = bare()
    model.register_forward_hook(lambda *a: print("hello from forward"))
    return model


class _Segv(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return self.lin(x)


def segv():
    return _Segv()


def hang():
    time.sleep(3600)


def meta():
    with torch.device("meta"):
        return bare()


class _Sleepy(nn.Module):
    """Fast in fp32, 4 s per step under autocast (SLEEPY_SECONDS): a bench interrupted in its second mode.
    Each autocast forward notes its start in sleepy_started.log and its end in sleepy_calls.log."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        if torch.is_autocast_enabled("cpu"):
            with open("sleepy_started.log", "a") as f:
                f.write("autocast forward\\n")
            time.sleep(float(os.environ.get("SLEEPY_SECONDS", "4")))
            with open("sleepy_calls.log", "a") as f:  # in the working directory: a test can follow the run
                f.write("autocast forward\\n")
        return self.lin(x)


def sleepy():
    return _Sleepy()
'''

KERAS_MODELS = '''
import keras


def bare():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
'''

FILES = {
    "tmodels.py": TORCH_MODELS,
    "kmodels.py": KERAS_MODELS,
    "exits_at_import.py": "import sys\nsys.exit(3)\n",
    "interrupts_at_import.py": "raise KeyboardInterrupt\n",
}


def write_user_files(folder) -> None:
    for name, text in FILES.items():
        (folder / name).write_text(text)
