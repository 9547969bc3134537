"""How the causal attention mask is applied, timed: a select (model/mixed_attention.py today)
against a second additive [1, 1, T, T] bias (the first version), TF graph mode on CPU.

    python benchmarks/causal_mask.py [--config lm_small_mixed] [--batch 16] [--seq_len 128]
        [--rounds 7] [--layers 12]

One process, one model, two traced functions (one per masking), called interleaved; medians of
`--rounds` rounds of forward passes (inference, `training=False`) and of forward + backward
passes. Prints the 1-minute load average before and after: a ratio taken above 1.0 does not count
(docs/PERFORMANCE.md). The two maskings give the same outputs (checked here, max |diff|).
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import json_out  # noqa: E402


def additive_biases(self, scores, attention_bias):
    """The first version: the causal mask as a second additive bias."""
    from keras import ops

    from model.mixed_attention import MASKED_KEY_BIAS, future_keys
    if attention_bias is not None:
        scores = scores + ops.cast(attention_bias, scores.dtype)
    future = ops.cast(future_keys(ops.shape(scores)[-1]), scores.dtype)
    return scores + future * MASKED_KEY_BIAS


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="lm_small_mixed")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layers", type=int, default=None)
    json_out.add_argument(parser)
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}", flush=True)
    import numpy as np
    import tensorflow as tf

    from model.config import ConvBertConfig
    from model.encoder import ConvBertModel
    from model.mixed_attention import MixedAttention
    config = ConvBertConfig.from_name(args.config).replace(causal=True)
    if args.layers:
        config = config.replace(num_hidden_layers=args.layers)
    model = ConvBertModel(config)
    ids = tf.constant(np.random.default_rng(0).integers(1000, 2000, (args.batch, args.seq_len)),
                      tf.int32)

    def forward(x):
        return model({"input_ids": x}, training=False)

    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model({"input_ids": x}, training=True)))
        return tape.gradient(loss, model.trainable_variables)[-1]   # dense (the first is the embedding: IndexedSlices)

    functions = {}
    select = MixedAttention._add_biases
    for name, method in (("additive bias", additive_biases), ("select", select)):
        MixedAttention._add_biases = method
        functions[name] = (tf.function(forward).get_concrete_function(ids),
                           tf.function(train_step).get_concrete_function(ids))
    MixedAttention._add_biases = select
    diff = np.abs(functions["select"][0](ids).numpy() - functions["additive bias"][0](ids).numpy())
    print(f"{args.config} causal, {config.num_hidden_layers} layers, batch {args.batch} x "
          f"{args.seq_len}; max |select - additive| = {diff.max():.2e}", flush=True)
    times = {(name, kind): [] for name in functions for kind in ("forward", "fwd+bwd")}
    for name, (fwd, step) in functions.items():   # warm-up
        fwd(ids).numpy()
        step(ids).numpy()
    for _ in range(args.rounds):
        for name, (fwd, step) in functions.items():
            for kind, fn in (("forward", fwd), ("fwd+bwd", step)):
                start = time.perf_counter()
                fn(ids).numpy()
                times[(name, kind)].append(time.perf_counter() - start)
    rows = []
    for kind in ("forward", "fwd+bwd"):
        old = statistics.median(times[("additive bias", kind)])
        new = statistics.median(times[("select", kind)])
        print(f"{kind:8s} median s: additive bias {old:.3f}, select {new:.3f}, "
              f"additive/select {old / new:.1f}x", flush=True)
        rows.append({"pass": kind, "additive_s": old, "select_s": new, "ratio": old / new})
    print(f"load after: {os.getloadavg()}", flush=True)
    json_out.write(args.json_out, rows, config=args.config, layers=config.num_hidden_layers,
                   batch=args.batch, seq_len=args.seq_len, max_abs_diff=float(diff.max()))


if __name__ == "__main__":
    main()
