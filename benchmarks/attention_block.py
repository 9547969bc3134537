"""Mixed-attention block vs our best self-attention block of the same size (ConvBERT Table 9).

Definitions (base, H = 768, d = 64; both blocks are `x -> LayerNorm(x + Dense_H(attn(x)))`, i.e.
BERT's `BertAttention` = self part + output dense + residual + LayerNorm, dropout off):
  * self-attention block: 12 self-attention heads; Q, K, V 768->768 (one fused [768, 2304]
    matmul), softmax(QK^T/8)V, output dense 768->768.
  * mixed block: ConvBERT's mixed attention, head_ratio 2: 6 self-attention heads (Q, K, V
    768->384) ‖ 6 span-based dynamic convolution heads (K = 9; span key = separable conv 768->384,
    kernel generator 384->54, conv values 768->384; Q|K|V|conv-values as one [768, 1536] matmul),
    concat 768 -> output dense 768->768.
Both use the same `MixedAttention` code path (conv_type "none" with 12 heads for self-attention),
so every speed-up of the shared parts (fused projections, head layout) helps both equally.

Each row: median time over interleaved rounds; ratio = median of per-round mixed/self ratios;
FLOPs ratio from model/flops.py (the floor the P2 target asks the time ratio to reach).

    python benchmarks/attention_block.py                  # fp32 CPU, TF graph + XLA + JAX
    python benchmarks/attention_block.py --bf16           # GPU mode (bf16 compute), for later
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common, json_out  # noqa: E402

SHAPES = [(1, 128), (8, 128), (1, 512), (8, 512)]


def block_configs(hidden=768, heads=12):
    """(self-attention, mixed) ConvBertConfigs of the two timed blocks, for model/flops.py."""
    from model.config import ConvBertConfig
    mixed = ConvBertConfig(hidden_size=hidden, num_attention_heads=heads)
    return mixed.replace(head_ratio=1, conv_type="none"), mixed


def flops_ratio(seq_len, hidden=768, heads=12):
    from model.flops import attention_flops
    self_, mixed = block_configs(hidden, heads)
    return sum(attention_flops(mixed, seq_len).values()) / sum(attention_flops(self_, seq_len).values())


def measure(mode, shapes, impls, rounds, bf16=False, backward=False, hidden=768, heads=12):
    """Runs in a process whose KERAS_BACKEND matches `mode`; returns a list of row dicts."""
    common.set_threads(int(os.environ.get("BENCH_THREADS", "2")))
    import keras
    import numpy as np
    if bf16:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    Block = common.attention_block_classes()
    d = hidden // heads
    blocks = {"self": Block(hidden, heads, d, "none")}
    for impl in impls:
        blocks[f"mixed[{impl}]"] = Block(hidden, heads // 2, d, "sdconv", implementation=impl)
    fns_for = {}
    backend = keras.backend.backend()
    for name, block in blocks.items():
        if backend == "tensorflow":
            fns_for[name] = common.tf_block_step(block, backward, jit_compile=(mode == "tf-xla"))
            if mode == "tf-eager":  # the same step, op by op
                fns_for[name] = fns_for[name].python_function
        else:
            import jax
            from keras import ops
            variables = [v.value for v in block.trainable_variables]

            def pure(vals, x, block=block):
                out, _ = block.stateless_call(vals, [], x)
                return ops.sum(out) if backward else out
            fns_for[name] = jax.jit(jax.grad(pure) if backward else pure)
            fns_for[name] = (lambda f, vals: (lambda x: f(vals, x)))(fns_for[name], variables)
    rows = []
    for batch, seq_len in shapes:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((batch, seq_len, hidden)).astype("float32")
        if backend == "tensorflow":
            import tensorflow as tf
            x = tf.constant(x, dtype="bfloat16" if bf16 else "float32")
        else:
            import jax.numpy as jnp
            x = jnp.asarray(x, dtype=jnp.bfloat16 if bf16 else jnp.float32)

        def runner(f):
            def run():
                out = f(x)
                leaf = out[0] if isinstance(out, (list, tuple)) else out
                common.block_sync(leaf)
            return run
        inner = max(1, int(64 // (batch * seq_len / 128)))
        times = common.interleaved({n: runner(f) for n, f in fns_for.items()}, rounds=rounds,
                                   warmup=2, inner=min(inner, 20))
        for name in blocks:
            if name == "self":
                continue
            rows.append(dict(mode=mode, batch=batch, seq_len=seq_len, impl=name,
                             self_ms=1e3 * common.median(times["self"]),
                             mixed_ms=1e3 * common.median(times[name]),
                             ratio=common.ratio_of_medians(times, name, "self"),
                             flops_ratio=flops_ratio(seq_len, hidden, heads)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="tf-graph,tf-xla,jax",
                    help="comma list of tf-graph (tf.function), tf-xla (jit_compile), tf-eager "
                         "(op by op), jax (jax.jit)")
    ap.add_argument("--impls", default="auto,band,shifted_sum,unfold")
    ap.add_argument("--shapes", default=",".join(f"{b}x{s}" for b, s in SHAPES))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--backward", action="store_true", help="time forward + backward")
    ap.add_argument("--bf16", action="store_true", help="GPU mode: mixed_bfloat16 compute")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    json_out.add_argument(ap)
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    impls = args.impls.split(",")
    if args.child:
        print("ROWS " + json.dumps(measure(args.child, shapes, impls, args.rounds, args.bf16,
                                           args.backward)))
        return
    common.header("attention block: mixed (ConvBERT) vs self-attention (BERT), base H=768",
                  "python " + " ".join(sys.argv))
    print(__doc__.split("Each row")[0].strip().split("\n", 1)[1])
    print(f"{'mode':9} {'b':>2} {'s':>4} {'mixed impl':20} {'self ms':>9} {'mixed ms':>9} "
          f"{'time ratio':>10} {'FLOPs ratio':>11}  {'pass':4}")
    all_rows = []
    for mode in args.modes.split(","):
        backend = "jax" if mode == "jax" else "tensorflow"
        out = common.run_subprocess(
            [os.path.abspath(__file__), "--child", mode, "--impls", args.impls, "--shapes",
             args.shapes, "--rounds", str(args.rounds)] + (["--bf16"] if args.bf16 else [])
            + (["--backward"] if args.backward else []),
            env={"KERAS_BACKEND": backend})
        rows = json.loads(out.split("ROWS ", 1)[1])
        all_rows += rows
        for r in rows:
            ok = "yes" if r["ratio"] <= r["flops_ratio"] else "no"
            print(f"{r['mode']:9} {r['batch']:>2} {r['seq_len']:>4} {r['impl']:20} "
                  f"{r['self_ms']:9.2f} {r['mixed_ms']:9.2f} {r['ratio']:10.3f} "
                  f"{r['flops_ratio']:11.3f}  {ok}", flush=True)
    json_out.write(args.json_out, all_rows)


if __name__ == "__main__":
    main()
