"""The Keras watch sets the record's module table when a trace adds a layer, not at every batch."""

import numpy as np

from ampkit.backends.tensorflow.integrations.watch import KerasWatch


class _Var:
    def __init__(self, value):
        self.value = value

    def read_value(self):
        return self.value


class _Stacked:
    def __init__(self, values):
        self.values = values

    def numpy(self):
        return np.array(self.values, dtype=np.float64)


class _TF:  # what _layers_row asks of TensorFlow: tf.stack(...).numpy()
    stack = _Stacked


class _Record:
    def __init__(self):
        self.tables, self.rows = [], []

    def set_modules(self, fwd, grad):
        self.tables.append((fwd, grad))

    def add(self, row):
        self.rows.append(row)


def test_the_module_table_is_set_once_per_new_layer_and_rows_follow_it():
    w = KerasWatch()
    w.record, w._tf, w.base, w.steps = _Record(), _TF, 0, 0
    w._names, w._types = ["dense", "relu", "out"], ["Dense", "ReLU", "Dense"]
    w._fvars = [_Var(1.0), _Var(2.0), _Var(3.0)]
    w._glayers, w._glayer = [0, 2], {0, 2}
    w._gvars = [_Var(0.5), _Var(0.25)]
    w._order, w._tabled = [0, 2], -1   # the first trace ran dense, then out
    for _ in range(3):
        w.steps += 1
        w._layers_row(1.0, None, None, False)
    assert w.record.tables == [([("dense", "Dense"), ("out", "Dense")], ["dense", "out"])]
    assert [(r.fwd, r.grad) for r in w.record.rows] == [([1.0, 3.0], [0.5, 0.25])] * 3
    w._order.append(1)                 # a retrace calls relu for the first time
    w._fvars[1].value = -1.0           # not written this batch: None in the row
    w._layers_row(1.0, None, None, False)
    assert len(w.record.tables) == 2 and w.record.tables[-1][0][-1] == ("relu", "ReLU")
    assert (w.record.rows[-1].fwd, w.record.rows[-1].grad) == ([1.0, 3.0, None], [0.5, 0.25])
