"""The TensorFlow/Keras backend: doctor, bench, parity and audit for Keras 3 on TensorFlow.

Everything here imports TensorFlow (lazily, inside the functions), never torch; the drivers reach it
through :class:`~ampkit.backends.tensorflow.backend.TensorFlowBackend`. Importing this
package quiets TensorFlow's C++ logs unless the user chose a level, so the cuInit/oneDNN notices
of CPU machines do not drown the reports.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
