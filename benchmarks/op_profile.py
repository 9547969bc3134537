"""Where the time goes: an op-by-op profile of ConvBERT next to its BERT / ELECTRA counterpart.

    python benchmarks/op_profile.py rtd   [--size small] [--batch 16] [--steps 6]
    python benchmarks/op_profile.py block [--shape 1x128] [--backward] [--steps 200]

`rtd`: one pre-training step (generator + discriminator + losses + backward + the driver's
`AdamWeightDecay`), ConvBERT vs ELECTRA of the same size (as `train_step.py`). `block`: the
base-size attention block, mixed vs self-attention (as `attention_block.py`). TF backend, graph
mode (`tf.function`), fp32, 2 intra-op threads.

Each step runs under `tf.profiler`; the time of every executed op is summed per op type and per
part of the model (generator, discriminator, optimizer, ...; forward and backward together), and
ConvBERT's sum is printed beside the baseline's with the difference. Op times are summed over all
threads (ops overlap), so they add up to more than the step's wall time, which is printed too.
The two models are profiled one after the other, not interleaved: differences under ~5% on the
same op (e.g. the feed-forward matmuls, identical in both) are noise.
"""
import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from benchmarks import common  # noqa: E402

# Scope prefix -> part of the model; first match wins (op names carry their Keras name scope,
# with "gradient_tape/" in front for the backward pass).
PARTS = [("adam_weight_decay/", "optimizer (incl. clipping)"),
         ("electra_pretrainer/generator_predictions/", "generator MLM head"),
         ("electra_pretrainer/generator/", "generator encoder"),
         ("electra_pretrainer/electra/embeddings", "embeddings"),
         ("electra_pretrainer/electra/", "discriminator encoder"),
         ("electra_pretrainer/", "embedding grads, RTD head, losses, sampling")]


def part_of(op_name):
    # Drop Keras' uniquifying suffixes: "electra_pretrainer_1/generator_1/x" -> "electra_pretrainer/generator/x".
    scope = re.sub(r"_\d+(?=/|$)", "", op_name.split(":")[0])
    scope = scope[len("gradient_tape/"):] if scope.startswith("gradient_tape/") else scope
    for prefix, part in PARTS:
        if scope.startswith(prefix):
            return part
    return "other (gradient sums, ...)"


def profile(fn, calls):
    """Runs fn() `calls` times under the TF profiler; returns ({op name: ms per call}, wall s)."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        wall = (time.perf_counter() - start) / calls
        tf.profiler.experimental.stop()
        path = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0]
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
    per_op = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                # Executed graph ops are named "scope/op:OpType"; executor bookkeeping is not.
                if ":" in name and "::" not in name and not name.startswith(("__", "EagerLocal")):
                    per_op[name] += event.duration_ps / 1e9 / calls
    return per_op, wall


def rtd_steps(args):
    import numpy as np
    from model.config import ConvBertConfig
    from pretrain.generator_config import default_generator_hidden_size
    cfg = ConvBertConfig.from_size(args.size)
    rng = np.random.default_rng(0)
    steps = {}
    for name, dcfg in (("ConvBERT", cfg),
                       ("ELECTRA", cfg.replace(head_ratio=1, conv_type="none", num_groups=1))):
        steps[name], _ = common.rtd_train_step(dcfg, default_generator_hidden_size(args.size),
                                               args.batch, args.seq, rng)
    return steps, f"RTD step, {args.size}, b{args.batch} s{args.seq}"


def block_steps(args):
    import keras
    import numpy as np
    import tensorflow as tf
    batch, seq_len = (int(v) for v in args.shape.split("x"))
    Block = common.attention_block_classes()
    x = tf.constant(np.random.default_rng(0).standard_normal((batch, seq_len, 768)).astype("float32"))
    steps = {}
    keras.utils.set_random_seed(0)
    for name, block in (("mixed", Block(768, 6, 64, "sdconv")), ("self", Block(768, 12, 64, "none"))):
        fn = common.tf_block_step(block, args.backward)
        steps[name] = lambda fn=fn: [t.numpy() for t in tf.nest.flatten(fn(x))]
    return steps, (f"attention block, base, b{batch} s{seq_len}, "
                   f"{'forward + backward' if args.backward else 'forward'}")


def table(title, key_a, key_b, a, b, rows):
    print(f"\n## {title}")
    print(f"{'':44} {key_a + ' ms':>12} {key_b + ' ms':>12} {'difference':>10}")
    keys = sorted(set(a) | set(b), key=lambda k: -abs(a[k] - b[k]))
    for k in keys[:rows]:
        print(f"{k[:44]:44} {a[k]:12.3f} {b[k]:12.3f} {a[k] - b[k]:10.3f}")
    print(f"{'all ops':44} {sum(a.values()):12.3f} {sum(b.values()):12.3f} "
          f"{sum(a.values()) - sum(b.values()):10.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["rtd", "block"])
    ap.add_argument("--size", default="small", help="rtd: model size")
    ap.add_argument("--batch", type=int, default=16, help="rtd: batch size")
    ap.add_argument("--seq", type=int, default=128, help="rtd: sequence length")
    ap.add_argument("--shape", default="1x128", help="block: BATCHxLENGTH")
    ap.add_argument("--backward", action="store_true", help="block: forward + backward")
    ap.add_argument("--steps", type=int, default=None, help="profiled calls per model "
                    "(default 6 RTD steps, 200 block calls)")
    ap.add_argument("--rows", type=int, default=25, help="op types to list")
    args = ap.parse_args()
    common.set_threads(int(os.environ.get("BENCH_THREADS", "2")))
    common.header("op-by-op profile, TF graph mode, fp32", "python " + " ".join(sys.argv))
    steps, title = rtd_steps(args) if args.what == "rtd" else block_steps(args)
    calls = args.steps or (6 if args.what == "rtd" else 200)
    by_type, by_part = {}, {}
    for fn in steps.values():
        for _ in range(3):  # trace, compile, warm up
            fn()
    # Profiled A, B, A, B; only the second pass counts (a function's first profiled session
    # ran up to 1.7x slow here).
    results = {}
    for _ in range(2):
        for name, fn in steps.items():
            results[name] = profile(fn, calls)
    for name, (per_op, wall) in results.items():
        by_type[name], by_part[name] = collections.Counter(), collections.Counter()
        for op, ms in per_op.items():
            by_type[name][op.rsplit(":", 1)[1]] += ms
            by_part[name][part_of(op)] += ms
        print(f"# {name}: {1e3 * wall:.2f} ms wall per call under the profiler, "
              f"{sum(per_op.values()):.2f} ms of op time", flush=True)
    a, b = list(steps)
    if args.what == "rtd":
        table(f"{title}: op time by part", a, b, by_part[a], by_part[b], args.rows)
    table(f"{title}: op time by op type", a, b, by_type[a], by_type[b], args.rows)


if __name__ == "__main__":
    main()
