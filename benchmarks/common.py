"""Shared helpers for the issue-7 benchmarks: thread pinning, interleaved timing, block builders.

Timing rule (the machine is a shared 2-core VM): every comparison is measured side by side in one
process, *interleaved* (A, B, A, B, ...), after warm-up, and reported as medians of repeated runs;
ratios are medians of the per-round ratios, which cancels most of the drift caused by other load.
"""
import os
import platform
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MACHINE = "2-core AMD EPYC VM, 24 GiB, no GPU"


def set_threads(n=2):
    """Pin intra-op threads of every framework in this process to n (before first use)."""
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
    os.environ.setdefault("XLA_FLAGS", "")
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend == "tensorflow" or "tensorflow" in sys.modules:
        import tensorflow as tf
        try:
            tf.config.threading.set_intra_op_parallelism_threads(n)
            tf.config.threading.set_inter_op_parallelism_threads(int(os.environ.get("BENCH_INTER_OP", "1")))
        except RuntimeError:
            pass
    if "torch" in sys.modules:
        import torch
        torch.set_num_threads(n)


def interleaved(fns, rounds=10, warmup=2, inner=1):
    """fns: {name: zero-arg callable that blocks until done}. Returns {name: [seconds per call]}.

    Runs warm-up calls, then `rounds` rounds in which every fn runs `inner` times in turn."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            times[name].append((time.perf_counter() - start) / inner)
    return times


def median(xs):
    return statistics.median(xs)


def ratio_of_medians(times, num, den):
    """Median over rounds of the per-round ratio num/den (robust to drift between rounds)."""
    return statistics.median(a / b for a, b in zip(times[num], times[den]))


def header(title, command):
    import datetime
    print(f"# {title}")
    print(f"# command: {command}")
    print(f"# machine: {MACHINE} ({platform.processor() or platform.machine()}), "
          f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")


def block_sync(x):
    """Block until a TF / JAX / torch result is ready (TF eager and torch are synchronous)."""
    if hasattr(x, "block_until_ready"):
        x.block_until_ready()
    elif hasattr(x, "numpy"):
        x.numpy()
    return x


def run_subprocess(args, env=None, timeout=1200):
    """Run a child Python (same interpreter) and return its stdout (raises on failure)."""
    full_env = {**os.environ, **(env or {})}
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    full_env["PYTHONPATH"] = repo + os.pathsep + full_env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, *args], env=full_env, capture_output=True, text=True,
                         timeout=timeout, cwd=repo)
    if out.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def attention_block_classes():
    """Keras layers for the two blocks compared in paper Table 9 (built lazily: Keras import)."""
    import keras

    from model.mixed_attention import MixedAttention

    class AttentionBlock(keras.layers.Layer):
        """x -> LayerNorm(x + Dense_H(attention(x))): BERT's `BertAttention` (self + output) with
        the self part either plain multi-head self-attention or ConvBERT's mixed attention."""

        def __init__(self, hidden, num_heads, head_size, conv_type, implementation="auto", **kw):
            super().__init__(**kw)
            self.attention = MixedAttention(num_heads, head_size, conv_type=conv_type,
                                            attention_probs_dropout_prob=0.0,
                                            conv_implementation=implementation)
            self.dense = keras.layers.Dense(hidden)
            self.norm = keras.layers.LayerNormalization(epsilon=1e-12)
            width = num_heads * head_size * (1 if conv_type == "none" else 2)
            self.attention.build((None, None, hidden))
            self.dense.build((None, None, width))
            self.norm.build((None, None, hidden))
            self.built = True

        def call(self, x, training=False):
            return self.norm(x + self.dense(self.attention(x, training=training)))

    return AttentionBlock


def tf_block_step(block, backward=False, jit_compile=False):
    """A `tf.function` running `block` on x: its output, or (backward) the gradients of
    sum(block(x)) with respect to its trainable variables (forward + backward)."""
    import tensorflow as tf
    if backward:
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(block(x))
            return tape.gradient(loss, block.trainable_variables)
    else:
        def step(x):
            return block(x)
    return tf.function(step, jit_compile=jit_compile)


def rtd_train_step(disc_cfg, generator_hidden_size, batch_size, seq_len, rng,
                   implementation="auto", jit_compile=None):
    """One ELECTRA/ConvBERT pre-training step as the driver runs it (TF backend): generator +
    discriminator + total loss + backward + `AdamWeightDecay` with global-norm clipping at 1.0,
    on a fixed random batch. Returns (zero-arg callable that runs one step and returns the loss
    as a number, trainable parameter count)."""
    import keras
    import numpy as np
    import tensorflow as tf
    from training.optimization import AdamWeightDecay
    from pretrain.electra_pretrainer import ElectraPretrainer
    from pretrain.generator_config import generator_config
    b, s = batch_size, seq_len
    batch = {"input_ids": tf.constant(rng.integers(1000, disc_cfg.vocab_size, (b, s)).astype("int32")),
             "input_mask": tf.ones((b, s), tf.int32), "segment_ids": tf.zeros((b, s), tf.int32),
             "example_id": tf.range(b, dtype=tf.int32)}
    keras.utils.set_random_seed(0)
    model = ElectraPretrainer(disc_cfg, generator_config(disc_cfg, generator_hidden_size),
                              conv_implementation=implementation)
    opt = AdamWeightDecay(learning_rate=1e-4, weight_decay_rate=0.01, clip_norm=1.0)
    opt.build(model.trainable_variables)

    @tf.function(jit_compile=jit_compile)
    def step(i):
        with tf.GradientTape() as tape:
            loss = model(batch, i, training=True)["total_loss"]
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    counter = iter(range(1, 2**31))

    def run():
        return step(tf.constant(next(counter), tf.int32)).numpy()
    n_params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    return run, n_params
