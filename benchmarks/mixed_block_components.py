"""Where the mixed-attention block's time goes: its parts timed alone (docs/PERFORMANCE.md P2), TF graph, fp32.

ConvBERT-base widths (H 768, 6 attention + 6 convolution heads of 64, K 9) next to the parts of the
self-attention block they replace. Each part is a `tf.function`, timed interleaved with the others
(median of --rounds), so the table shows which non-matmul pieces keep the mixed block above its
FLOPs ratio.

    python benchmarks/mixed_block_components.py [--shapes 1x128,8x512] [--rounds 15]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from benchmarks import common  # noqa: E402

HIDDEN, WIDTH, HEADS, KERNEL = 768, 384, 6, 9


def parts(batch, seq_len):
    """{name: zero-arg tf.function} for one shape."""
    import numpy as np
    import tensorflow as tf

    from model.span_dynamic_conv import SpanDynamicConv, depthwise_conv_shifted_sum
    rng = np.random.default_rng(0)

    def const(*shape, scale=1.0):
        return tf.constant(rng.standard_normal(shape).astype("float32") * scale)
    x, q = const(batch, seq_len, HIDDEN), const(batch, seq_len, WIDTH)
    sdc = SpanDynamicConv(HEADS, WIDTH // HEADS, KERNEL)
    sdc.build(((None, None, HIDDEN), (None, None, WIDTH)))
    w_mixed, w_self = const(HIDDEN, 4 * WIDTH, scale=0.02), const(HIDDEN, 3 * HIDDEN, scale=0.02)
    w_out = const(HIDDEN, HIDDEN, scale=0.02)
    depthwise, pointwise = sdc.conv_attn_key.depthwise_kernel, sdc.conv_attn_key.pointwise_kernel
    heads = tf.reshape(q, (batch, seq_len, HEADS, WIDTH // HEADS))
    fns = {
        "fused Q/K/V/conv-value projection 768->1536 (mixed)": lambda: tf.matmul(x, w_mixed),
        "fused Q/K/V projection 768->2304 (self)": lambda: tf.matmul(x, w_self),
        "output dense 768->768 (both)": lambda: tf.matmul(x, w_out),
        "span key (Keras SeparableConv1D)": lambda: sdc.conv_attn_key(x),
        "  depthwise conv alone (tf.nn.depthwise_conv2d)": lambda: tf.nn.depthwise_conv2d(
            x[:, None], depthwise[None], [1, 1, 1, 1], "SAME"),
        "  depthwise conv alone (shifted sum)": lambda: depthwise_conv_shifted_sum(
            x, depthwise[:, :, 0]),
        "  pointwise 768->384 alone (matmul)": lambda: tf.matmul(x, pointwise[0]),
        "kernel generator (q*key, dense 384->54, softmax)": lambda: tf.nn.softmax(tf.reshape(
            sdc.conv_attn_kernel(q * q), (batch, seq_len, HEADS, KERNEL)), -1),
        "scores + softmax, 6 heads": lambda: tf.nn.softmax(
            tf.einsum("bqnd,bknd->bnqk", heads, heads)),
    }
    return {name: tf.function(fn) for name, fn in fns.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1x128,8x512")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    common.header("mixed-attention block components (ConvBERT-base widths), TF graph, fp32",
                  "python " + " ".join(sys.argv))
    common.set_threads(2)
    for shape in args.shapes.split(","):
        batch, seq_len = (int(v) for v in shape.split("x"))
        fns = parts(batch, seq_len)
        runners = {name: (lambda f=f: f().numpy()) for name, f in fns.items()}
        times = common.interleaved(runners, rounds=args.rounds, warmup=2)
        print(f"## b{batch} s{seq_len}")
        for name in fns:
            print(f"{name:55s} {common.median(times[name]) * 1e3:9.3f} ms", flush=True)


if __name__ == "__main__":
    main()
