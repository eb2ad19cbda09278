"""Dynamic loss scaling for Keras 3 that holds under every ``tf.distribute`` strategy."""

from __future__ import annotations

_CLASS: dict[str, type] = {}


def _finite_everywhere(finite):
    """``finite`` (this replica's flag) combined over every replica in sync: True only when all are."""
    import tensorflow as tf

    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync <= 1:
        return finite
    bad = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(tf.logical_not(finite), tf.float32))
    return tf.equal(bad, 0.0)


def all_finite(grads):
    """True (a boolean tensor) when every float value of every gradient is finite: a dense tensor's
    elements, an ``IndexedSlices``' rows (each of them, repeated indices too), the float components of
    any other composite tensor. ``None`` gradients are left out; no gradients at all is True."""
    import tensorflow as tf

    checks = [tf.reduce_all(tf.math.is_finite(part))
              for g in grads if g is not None
              for part in tf.nest.flatten(g, expand_composites=True) if part.dtype.is_floating]
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def loss_scale_optimizer_class() -> type:
    """Keras 3's LossScaleOptimizer with the finite check combined across replicas (made once)."""
    if "keras" not in _CLASS:
        import keras
        from keras import ops

        @keras.saving.register_keras_serializable(package="ampkit")
        class AmpkitLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
            """``keras.optimizers.LossScaleOptimizer`` whose skip decision is the same on every replica:
            a step is skipped everywhere when any replica's gradients are non-finite, sparse ones
            (an Embedding's ``IndexedSlices``) read row by row."""

            def check_finite(self, grads):
                if keras.backend.backend() != "tensorflow":
                    return super().check_finite(grads)
                return all_finite(grads)

            def _tf_apply(self, grads, trainable_variables=None):
                import tensorflow as tf

                if tf.distribute.in_cross_replica_context():
                    raise ValueError("apply() must be called in a replica context.")
                finite = _finite_everywhere(self.check_finite(grads))
                if tf.__internal__.distribute.strategy_supports_no_merge_call():
                    ops.cond(finite, lambda: self._stateful_handle_finite_grads(grads, trainable_variables),
                             self._stateful_handle_non_finite_grads)
                    return

                def cross_replica(distribution, finite, grads, variables):
                    # every replica holds the same flag now: the first one speaks for all
                    flag = distribution.experimental_local_results(finite)[0]

                    def apply_fn():
                        distribution.extended.call_for_each_replica(self._stateful_handle_finite_grads,
                                                                    args=(grads, variables))

                    # in the cross-replica context: the inner optimizer's apply makes a merge call
                    ops.cond(flag, apply_fn, self._stateful_handle_non_finite_grads)

                tf.distribute.get_replica_context().merge_call(cross_replica, args=(finite, grads, trainable_variables))

        _CLASS["keras"] = AmpkitLossScaleOptimizer
    return _CLASS["keras"]


def upgrade(opt):
    """A Keras 3 LossScaleOptimizer made by the user, given ampkit's cross-replica check in place
    (same state, same object); other optimizers unchanged."""
    cls = loss_scale_optimizer_class()
    if type(opt) is cls.__mro__[1]:  # exactly keras.optimizers.LossScaleOptimizer
        opt.__class__ = cls
    return opt


def ensure_built(opt, variables, backend: str) -> None:
    """Build ``opt`` for ``variables`` before a custom-loop step when it is not built yet (Keras 3
    only: tf_keras optimizers build themselves). On TensorFlow the build is lifted out of any
    ``tf.function`` being traced (``tf.init_scope``), under the strategy in force."""
    if getattr(opt, "built", True) or not hasattr(opt, "build"):
        return
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.init_scope():
            opt.build(variables)
    else:
        opt.build(variables)
