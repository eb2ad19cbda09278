"""The same random numbers in the float32 reference and the audited pass of a Keras audit."""

from __future__ import annotations

import contextlib
import inspect
import sys

from ..tfimport import import_tensorflow


class MatchedRandomness:
    """While :meth:`active`, Keras random draws come from ``(seed, k)``, k counting the draws since
    :meth:`start`; floating draws in float32 (cast to the asked dtype)."""

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self.count = 0
        self.draws = 0  # over the whole life of the object: tests check that draws happened

    def start(self, seed: int) -> None:
        """Begin a pass: its draws repeat those of any other pass started with the same seed.

        Also seeds TensorFlow's global generator (which resets its eager kernels' streams), for
        stateful ``tf.random`` ops a user's layer may call directly."""
        self.seed, self.count = int(seed) % (2**31 - 1), 0
        import_tensorflow().random.set_seed(self.seed)

    # --- seeds ----------------------------------------------------------------------------------
    def next_seed(self):
        """The stateless seed of the next draw (an int32 pair)."""
        tf = import_tensorflow()
        k = self.count
        self.count += 1
        self.draws += 1
        return tf.constant([self.seed, k], dtype=tf.int32)

    def next_int_seed(self) -> int:
        """The next draw's seed as one int (for functions that take an int seed)."""
        k = self.count
        self.count += 1
        self.draws += 1
        return (self.seed * 1_000_003 + k) % (2**31 - 2) + 1

    # --- the draws --------------------------------------------------------------------------------
    def uniform(self, shape, minval=0.0, maxval=None, dtype=None):
        tf = import_tensorflow()
        dtype = tf.as_dtype(dtype or "float32")
        if dtype.is_floating:
            u = tf.random.stateless_uniform(shape, seed=self.next_seed(), minval=tf.cast(minval, "float32"),
                                            maxval=tf.cast(1.0 if maxval is None else maxval, "float32"),
                                            dtype=tf.float32)
            return tf.cast(u, dtype)
        return tf.random.stateless_uniform(shape, seed=self.next_seed(), minval=minval, maxval=maxval, dtype=dtype)

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=None, truncated=False):
        tf = import_tensorflow()
        dtype = tf.as_dtype(dtype or "float32")
        draw = tf.random.stateless_truncated_normal if truncated else tf.random.stateless_normal
        z = draw(shape, seed=self.next_seed(), mean=tf.cast(mean, "float32"), stddev=tf.cast(stddev, "float32"),
                 dtype=tf.float32)
        return tf.cast(z, dtype)

    def dropout(self, inputs, rate, noise_shape=None):
        """``inputs * 1/(1-rate)`` where a float32 uniform draw is >= rate, else 0 (as TensorFlow's
        ``stateless_dropout`` computes it, in the input's dtype; only the mask is drawn in float32)."""
        tf = import_tensorflow()
        x = tf.convert_to_tensor(inputs)
        if isinstance(rate, (int, float)):
            if rate >= 1.0:
                return tf.zeros_like(x)
            if rate <= 0.0:
                return x
        if noise_shape is None:
            shape = tf.shape(x)
        else:
            full = tf.shape(x)
            shape = [full[i] if d is None else d for i, d in enumerate(noise_shape)]
        u = tf.random.stateless_uniform(shape, seed=self.next_seed(), dtype=tf.float32)
        keep = tf.cast(u >= tf.cast(rate, tf.float32), x.dtype)
        scale = tf.cast(1.0 / (1.0 - tf.cast(rate, tf.float32)), x.dtype)
        return x * scale * keep

    # --- patching ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def active(self):
        """Route the random draws of Keras 3 (its TensorFlow backend) and of tf_keras (when loaded)
        through this object; everything is put back on exit."""
        patches = []
        try:
            if "keras" in sys.modules:
                patches += self._keras3_patches()
            if "tf_keras" in sys.modules:
                patches += self._tf_keras_patches()
        except ImportError:
            pass
        saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
        try:
            for owner, name, fn in patches:
                setattr(owner, name, fn)
            yield self
        finally:
            for owner, name, fn in saved:
                setattr(owner, name, fn)

    def _keras3_patches(self) -> list:
        from keras.src.backend.tensorflow import random as kr

        me = self

        def normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
            return me.normal(shape, mean, stddev, dtype or _floatx())

        def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
            return me.normal(shape, mean, stddev, dtype or _floatx(), truncated=True)

        def uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=None):
            return me.uniform(shape, minval, maxval, dtype or _floatx())

        def dropout(inputs, rate, noise_shape=None, seed=None):
            return me.dropout(inputs, rate, noise_shape)

        patches = [(kr, "normal", normal), (kr, "truncated_normal", truncated_normal), (kr, "uniform", uniform),
                   (kr, "dropout", dropout)]
        for name in ("categorical", "randint", "shuffle", "gamma", "binomial", "beta"):
            fn = kr.__dict__.get(name)
            if fn is not None:
                patches.append((kr, name, self._int_seeded(fn)))
        return patches

    def _int_seeded(self, fn):
        """``fn`` (a Keras 3 backend draw taking ``seed=``) given the counter's next int seed."""
        sig = inspect.signature(fn)
        me = self

        def draw(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            bound.arguments["seed"] = me.next_int_seed()
            return fn(*bound.args, **bound.kwargs)

        return draw

    def _tf_keras_patches(self) -> list:
        from tf_keras.src import backend as kb

        me = self
        gen = kb.RandomGenerator

        def random_normal(self, shape, mean=0.0, stddev=1.0, dtype=None, nonce=None):
            return me.normal(shape, mean, stddev, dtype or kb.floatx())

        def truncated_normal(self, shape, mean=0.0, stddev=1.0, dtype=None, nonce=None):
            return me.normal(shape, mean, stddev, dtype or kb.floatx(), truncated=True)

        def random_uniform(self, shape, minval=0.0, maxval=None, dtype=None, nonce=None):
            return me.uniform(shape, minval, maxval, dtype or kb.floatx())

        def dropout(self, inputs, rate, noise_shape=None):
            return me.dropout(inputs, rate, noise_shape)

        def make_seed_for_stateless_op(self):
            return me.next_seed()

        def make_legacy_seed(self):
            return me.next_int_seed()

        return [(gen, "random_normal", random_normal), (gen, "truncated_normal", truncated_normal),
                (gen, "random_uniform", random_uniform), (gen, "dropout", dropout),
                (gen, "make_seed_for_stateless_op", make_seed_for_stateless_op),
                (gen, "make_legacy_seed", make_legacy_seed)]


def _floatx() -> str:
    import keras

    return keras.config.floatx()
