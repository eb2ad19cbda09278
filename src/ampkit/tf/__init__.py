"""The TensorFlow/Keras backend: doctor, bench, parity and audit for Keras 3 on TensorFlow.

Importing this package (never done by ``import ampkit``) quiets TensorFlow's C++ logs unless the
user chose a level, so the cuInit/oneDNN notices of CPU machines do not drown the reports.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
