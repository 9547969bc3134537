"""GPU pre-training throughput: RTD (ELECTRA objective) for ConvBERT-base vs ELECTRA-base, JAX.

    KERAS_BACKEND=jax python benchmarks/gpu_pretrain.py [--batch 128] [--seq 128] [--steps 20]
    KERAS_BACKEND=jax python benchmarks/gpu_pretrain.py --tiny --steps 3     # CPU smoke test

One jitted step = masking + generator forward + Gumbel sampling + discriminator forward + total
loss + window metrics + backward + AdamW: the JAX training core's step (`JaxTrainingCore.
make_step` over `ElectraPretrainer` and `pretrain.task.window_metrics`, what the
pre-training task's step computes),
bf16 compute (`mixed_bfloat16`: fp32 weights / optimizer, bf16 matmuls). Reported: sequences/s
(median over timed steps after 3 warm-up steps) and model-FLOPs utilisation:

    model FLOPs per sequence = 3 x seq_len x (F_disc + F_gen)     (forward + backward = 3 x forward)
    F_disc = forward FLOPs/token of the discriminator + its binary head
    F_gen  = forward FLOPs/token of the generator + MLM head on 15.625% of the tokens
    (model/flops.py, ELECTRA's counting: 2 FLOPs per multiply-add, dense embedding lookup)
    MFU = sequences/s x model FLOPs per sequence / peak bf16 FLOP/s of the device

Peak bf16 dense FLOP/s: model/flops.py PEAK_BF16_TFLOPS (H100 / H200 SXM 989e12, A100 312e12;
pass --peak_tflops otherwise). The counting is model/flops.rtd_model_flops_per_sequence.
Note ELECTRA's paper convention counts training as 2 x forward; MFU here uses the usual 3 x.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KERAS_BACKEND", "jax")



def run(name, disc_cfg, args):
    import jax
    import keras
    import numpy as np

    from training import optimization
    from pretrain.electra_pretrainer import ElectraPretrainer
    from pretrain.generator_config import generator_config
    from pretrain.task import window_metrics
    from training.jax_core import JaxTrainingCore
    from training.settings import TrainSettings
    gen_cfg = generator_config(disc_cfg, args.gen)
    keras.utils.set_random_seed(0)
    model = ElectraPretrainer(disc_cfg, gen_cfg, conv_implementation=args.impl)
    b, s = args.batch, args.seq
    rng = np.random.default_rng(0)
    batch = {"input_ids": jax.numpy.asarray(rng.integers(min(1000, disc_cfg.vocab_size // 2), disc_cfg.vocab_size, (b, s)), "int32"),
             "input_mask": jax.numpy.ones((b, s), "int32"),
             "segment_ids": jax.numpy.zeros((b, s), "int32"),
             "example_id": jax.numpy.arange(b, dtype="int32")}
    model(batch, step=0, training=False)   # build the variables
    # The toolkit's own step (training/jax_core.py): what `KERAS_BACKEND=jax run_pretraining.py`
    # runs, metrics included, with ELECTRA's optimizer and schedule.
    schedule = optimization.linear_warmup_linear_decay(2e-4, 10000, 1000000)
    opt = optimization.AdamWeightDecay(schedule, weight_decay_rate=0.01, clip_norm=1.0,
                                       name_map={v.path: v for v in model.trainable_variables})
    opt.build(model.trainable_variables)
    core = JaxTrainingCore(TrainSettings(total_steps=args.warmup + args.steps, batch_size=b,
                                         learning_rate=2e-4))
    train_step = core.make_step(
        model, opt, lambda out, batch: (out["total_loss"], window_metrics(batch, out)))
    state = ([v.value for v in model.trainable_variables],
             [v.value for v in model.non_trainable_variables], [v.value for v in opt.variables])

    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        state, metrics = train_step(state, batch, np.int64(i))
        loss = metrics["loss"].block_until_ready()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    seqs = b / step_s
    from model.flops import peak_bf16_tflops, rtd_model_flops_per_sequence
    flops = rtd_model_flops_per_sequence(disc_cfg, gen_cfg, s)
    device = jax.devices()[0]
    peak = args.peak_tflops
    if peak is None:
        peak = peak_bf16_tflops(device.device_kind)
    mfu = f"{100 * seqs * flops / (peak * 1e12):.1f}%" if peak else "n/a (unknown peak)"
    print(f"{name:9} {device.device_kind:>16} b{b} s{s}: step {1e3 * step_s:8.1f} ms  "
          f"{seqs:9.1f} seq/s  model FLOPs/seq {flops:.3e}  MFU {mfu}  loss {float(loss):.3f}",
          flush=True)
    return seqs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="base")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--gen", type=float, default=None, help="generator width fraction (default official)")
    ap.add_argument("--impl", default="auto", help="conv implementation")
    ap.add_argument("--fp32", action="store_true", help="no mixed_bfloat16")
    ap.add_argument("--peak_tflops", type=float, default=None)
    ap.add_argument("--tiny", action="store_true", help="tiny config for a CPU smoke test")
    args = ap.parse_args()
    import keras
    if keras.backend.backend() != "jax":
        raise SystemExit("run with KERAS_BACKEND=jax")
    if not args.fp32:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    from model import ConvBertConfig
    from pretrain.generator_config import default_generator_hidden_size
    cfg = ConvBertConfig.from_size(args.size)
    if args.gen is None:
        args.gen = default_generator_hidden_size(args.size)
    if args.tiny:
        cfg = cfg.replace(hidden_size=64, num_attention_heads=2, intermediate_size=128,
                          num_hidden_layers=2, embedding_size=64, vocab_size=1000)
        args.batch, args.seq, args.gen = min(args.batch, 4), min(args.seq, 32), 0.5
    print(f"# RTD pre-training throughput, {args.size}{' (tiny)' if args.tiny else ''}, "
          f"{'fp32' if args.fp32 else 'bf16'}, JAX {__import__('jax').__version__}")
    conv = run("ConvBERT", cfg, args)
    electra = run("ELECTRA", cfg.replace(head_ratio=1, conv_type="none", num_groups=1), args)
    print(f"ConvBERT / ELECTRA throughput: {conv / electra:.3f}")


if __name__ == "__main__":
    main()
