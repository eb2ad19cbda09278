"""The TensorFlow/Keras backend: doctor, bench, parity and audit for Keras 3 on TensorFlow."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
