"""What doctor times for TensorFlow/Keras, per mode: kernels (a matmul and a convolution in the
mode's compute dtype) and short training steps through the Keras engine (a small conv net and a
small transformer block built under the mode's policy, one compiled ``tf.function`` step each),
sized for the device. Interleaving, rounds and statistics: :mod:`ampkit.rounds` (the plan
of rounds: :mod:`ampkit.doctor.driver`); the kernels themselves: :mod:`.doctor_ops` (shared with the
quick check behind ``auto``).

Every op ends in ``.numpy()``, which waits for the result (a host-device sync), so host timing is
right on a GPU too.
"""

from __future__ import annotations

from ...rounds import Work
from .doctor_ops import conv_op, matmul_op
from .environment import import_tensorflow


def sizes(gpu: bool) -> dict:
    if gpu:
        return {"matmul_n": 8192, "conv": (64, 56, 56, 256, 256), "net": (64, 64, 64), "block": (32, 256, 512)}
    # CPU: no conv net step ("net": None). The training ratio sums the steps' times, and on one thread
    # the conv net's step took 0.8 ms beside the block's 120 ms (under 1% of the ratio: it cannot
    # change the answer), while building and tracing it cost about 0.25 s of CPU per mode (#41)
    return {"matmul_n": 512, "conv": (8, 32, 32, 32, 64), "net": None, "block": (8, 64, 256)}


def kernels(mode: str, s: dict) -> dict:
    return {"matmul": matmul_op(mode, s["matmul_n"]), "conv": conv_op(mode, s["conv"])}


def _conv_net(keras, c: int, hw: int):
    inputs = keras.Input((hw, hw, 3))
    h = keras.layers.Conv2D(c, 3, padding="same", activation="relu")(inputs)
    h = keras.layers.Conv2D(2 * c, 3, strides=2, padding="same", activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(10, dtype="float32")(h))


def _block(keras, seq: int, d: int):
    """A pre-norm transformer encoder block and a float32 classifier head."""
    inputs = keras.Input((seq, d))
    h = keras.layers.LayerNormalization()(inputs)
    h = inputs + keras.layers.MultiHeadAttention(max(1, d // 64), 64)(h, h)
    f = keras.layers.LayerNormalization()(h)
    f = keras.layers.Dense(4 * d, activation="gelu")(f)
    h = h + keras.layers.Dense(d)(f)
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(inputs, keras.layers.Dense(10, dtype="float32")(h))


def _lazy(make):
    """A step built (model, optimizer, the traced ``tf.function``: seconds) on its first call, which is
    the doctor's warm-up: a mode the screen look decides slower never builds its training steps."""
    step = []

    def call():
        if not step:
            logger = import_tensorflow().get_logger()
            level = logger.level
            logger.setLevel("ERROR")  # one tf.function per model by design: TF's "retracing" warning does not apply
            try:
                step.append(make())
            finally:
                logger.setLevel(level)
            return None  # built and traced (measure._Timed then warms it up with a second call)
        return step[0]()
    call.builds_on_first_call = True
    return call


def _train_step(mode: str, build, x, y):
    from .engine.mixed_precision import MixedPrecision

    tf = import_tensorflow()
    import keras

    mp = MixedPrecision(mode)
    keras.utils.set_random_seed(0)
    with mp.scope():
        model = mp.prepare(build())  # fp8: Keras float8 layers; other modes: as built
        opt = mp.optimizer(keras.optimizers.SGD(1e-3))
    opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def compiled():
        with mp.scope():
            return mp.train_step(model, opt, x, y, loss_fn)

    compiled()  # trace here (the warm-up), where the logger is quiet: see work()
    return lambda: compiled().numpy()


def training(mode: str, s: dict) -> dict:
    tf = import_tensorflow()
    import keras

    b2, seq, d = s["block"]
    x_seq = tf.random.stateless_normal((b2, seq, d), seed=(2, 2))
    y2 = tf.constant([i % 10 for i in range(b2)])
    steps = {}
    if s["net"] is not None:
        bs, c, hw = s["net"]
        x_img = tf.random.stateless_normal((bs, hw, hw, 3), seed=(2, 1))
        y1 = tf.constant([i % 10 for i in range(bs)])
        steps["train_convnet"] = (_lazy(lambda: _train_step(mode, lambda: _conv_net(keras, c, hw), x_img, y1)), None)
    steps["train_transformer"] = (_lazy(lambda: _train_step(mode, lambda: _block(keras, seq, d), x_seq, y2)), None)
    return steps


def work(mode: str, gpu: bool) -> Work:
    """The mode's kernels and training steps, sized for a GPU (``gpu``) or the CPU."""
    s = sizes(gpu)
    logger = import_tensorflow().get_logger()
    level = logger.level
    logger.setLevel("ERROR")  # one tf.function per model by design: TF's "retracing" warning does not apply
    try:
        from .doctor_ops import size_work

        if mode == "fp8":  # no fp8 kernel to time in TensorFlow: Keras float8 training steps only (XLA's fp8 GEMMs)
            return Work({}, training(mode, s), notes={"matmul": "fp8: timed through Keras float8 training steps only"})
        return Work(kernels(mode, s), training(mode, s), at_size=lambda n: size_work(mode, n))
    finally:
        logger.setLevel(level)
