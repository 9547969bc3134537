"""Peak memory of one forward + backward pass: mixed-attention block vs self-attention block
(docs/PERFORMANCE.md P5), base H = 768 (block definitions as in attention_block.py), fp32 CPU, TF graph mode.

Method (CPU has no allocator statistics in TF): every block runs in its own fresh subprocess with
`MALLOC_MMAP_THRESHOLD_=65536`, so every tensor buffer larger than 64 KiB is its own mmap and is
returned to the OS when freed — resident memory then follows live tensors. The child builds the
block, traces fwd+bwd once on a small input (shape-polymorphic tf.function), runs it once at the
measured shape (warm-up), then for each of `--repeats` runs: `malloc_trim`, resets the kernel's peak-RSS counter (`echo 5 >
/proc/self/clear_refs`), reads VmRSS (baseline), runs fwd+bwd (loss = sum of outputs, gradients
w.r.t. input and all weights) and reads VmHWM (peak). Reported: median of (peak - baseline), i.e.
the extra memory the pass needs on top of weights and input.

    python benchmarks/memory.py [--batch 8] [--seq 512] [--impls auto,band,shifted_sum,unfold]
"""
import argparse
import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common, json_out  # noqa: E402


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def child(kind, impl, batch, seq_len, repeats):
    os.environ["KERAS_BACKEND"] = "tensorflow"
    common.set_threads(2)
    import numpy as np
    import tensorflow as tf
    Block = common.attention_block_classes()
    block = (Block(768, 12, 64, "none") if kind == "self"
             else Block(768, 6, 64, "sdconv", implementation=impl))

    @tf.function(input_signature=[tf.TensorSpec([None, seq_len, 768], tf.float32)])
    def fwd_bwd(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(block(x))
        grads = tape.gradient(loss, [x] + block.trainable_variables)
        return tf.add_n([tf.reduce_sum(g) for g in grads])

    fwd_bwd(tf.zeros((1, seq_len, 768))).numpy()
    fwd_bwd(tf.zeros((1, seq_len, 768))).numpy()
    x = tf.constant(np.random.default_rng(0).standard_normal((batch, seq_len, 768)).astype("float32"))
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status("VmRSS")
    fwd_bwd(x).numpy()
    return [_status("VmHWM") - base]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--impls", default="auto,band,shifted_sum,unfold")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    json_out.add_argument(ap)
    args = ap.parse_args()
    if args.child:
        print("DELTAS " + json.dumps(child(args.child[0], args.child[1], args.batch, args.seq,
                                           args.repeats)))
        return
    common.header(f"peak memory, fwd+bwd, attention block base, b{args.batch} s{args.seq}, fp32",
                  "python " + " ".join(sys.argv))
    env = {"MALLOC_MMAP_THRESHOLD_": "65536", "KERAS_BACKEND": "tensorflow"}
    results = {}
    for kind, impl in [("self", "-")] + [("mixed", i) for i in args.impls.split(",")]:
        deltas = []
        for _ in range(args.repeats):   # one fresh process per measurement
            out = common.run_subprocess([os.path.abspath(__file__), "--child", kind, impl, "--batch",
                                         str(args.batch), "--seq", str(args.seq)], env=env)
            deltas += json.loads(out.split("DELTAS ", 1)[1])
        results[(kind, impl)] = common.median(deltas)
        print(f"{kind:6} {impl:12} peak extra {results[(kind, impl)] / 2**20:8.1f} MiB  "
              f"(runs: {', '.join(f'{d / 2**20:.1f}' for d in deltas)})", flush=True)
    self_peak = results[("self", "-")]
    for (kind, impl), v in results.items():
        if kind == "mixed":
            print(f"mixed[{impl}] / self = {v / self_peak:.3f}  pass (<= 1): "
                  f"{'yes' if v <= self_peak else 'no'}")
    json_out.write(args.json_out, [
        {"kind": kind, "impl": impl, "peak_extra_bytes": v, "ratio": v / self_peak}
        for (kind, impl), v in results.items()], batch=args.batch, seq=args.seq)


if __name__ == "__main__":
    main()
