"""RTD pre-training throughput of ConvBERT against ELECTRA on the JAX training core, per model size.

    KERAS_BACKEND=jax python benchmarks/gpu_pretrain.py [--model_size=small,base] [--batch 128]
        [--seq 128] [--steps_per_call 10] [--calls 5] [--rounds 3] [--output results.json]
    KERAS_BACKEND=jax python benchmarks/gpu_pretrain.py --tiny     # CPU smoke (CI)

What is timed is what `KERAS_BACKEND=jax python run_pretraining.py` trains with: the pre-training
task (pretrain/task.py: masking, generator, Gumbel sampling, discriminator, total loss, window
metrics) on the JAX core's program (training/jax_core.py: `--steps_per_call` steps per compiled
call, state donated, learning rate computed on the device, metrics summed on the device), with
ELECTRA's optimizer, bf16 compute (`mixed_bfloat16`: fp32 weights and optimizer state). One
fixed batch of random ids is stacked into the call's block and uploaded once (the input
pipeline is measured by benchmarks/jax_input.py). Per size, ConvBERT and ELECTRA (the same
config with `conv_type="none"`, `head_ratio=1`: BERT self-attention) run in interleaved rounds
of `--calls` calls; a round's figure is its wall time per step, waited for at its end; the
median over rounds is reported:

    sequences/s = batch / median step time
    model FLOPs per sequence = 3 x seq_len x (F_disc + F_gen)      (forward + backward = 3 x forward)
    MFU = sequences/s x model FLOPs per sequence / peak bf16 FLOP/s of the device
    ConvBERT / ELECTRA = ratio of their median step times (the issue's target: <= 1.05 at small,
    <= 1.0 at base)

F_disc, F_gen: model/flops.py (ELECTRA's counting: 2 FLOPs per multiply-add, the MLM head on
15.625% of the tokens); peak: model/flops.py PEAK_BF16_TFLOPS (H100 / H200 SXM 989e12, A100
312e12; `--peak_tflops` otherwise, "n/a" on a CPU). Prints the 1-minute load average before and
after and the whole process's wall time.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training.compile_cache import FLAG_HELP as JAX_CACHE_HELP, enable_compile_cache  # noqa: E402

ELECTRA = {"conv_type": "none", "head_ratio": 1, "num_groups": 1}
TINY = {"hidden_size": 32, "embedding_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64}
SPECIAL = {"cls_id": 101, "sep_id": 102, "mask_id": 103}


def build(size, electra, args):
    """(program, example args, pretraining task) of one model on the JAX core."""
    import numpy as np
    from pretrain.generator_config import default_generator_hidden_size
    from pretrain.hparams import make_hparams
    from pretrain.jax_trainer import pretraining_core
    overrides = dict(ELECTRA if electra else {}, **(TINY if args.tiny else {}))
    vocab = 1000 if args.tiny else 30522
    hp = make_hparams(overrides={
        "model_size": size, "model_name": "electra" if electra else "convbert",
        "vocab_size": vocab, "train_batch_size": args.batch, "max_seq_length": args.seq,
        "precision": "fp32" if args.fp32 else "bf16", "learning_rate": 5e-4,
        "num_train_steps": 1_000_000, "num_warmup_steps": 10_000,
        "generator_hidden_size": default_generator_hidden_size(size),
        "steps_per_loop": args.steps_per_call, "log_every_n_steps": args.steps_per_call,
        "model_hparam_overrides": overrides})
    task, core = pretraining_core(hp, [], hp.vocab_size, SPECIAL, log=lambda *_: None)
    rng = np.random.default_rng(0)
    ids = rng.integers(min(1000, vocab // 2), vocab, (args.batch, args.seq)).astype(np.int32)
    ids[:, 0], ids[:, -1] = SPECIAL["cls_id"], SPECIAL["sep_id"]
    batch = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids),
             "example_id": np.arange(args.batch, dtype=np.int32)}
    return core.train_program(), core.example_args(batch, args.steps_per_call), task


def bench_size(size, args, log=print):
    """{model: row} and the ConvBERT / ELECTRA step-time ratio of one model size."""
    import jax
    from model.flops import peak_bf16_tflops, rtd_model_flops_per_sequence
    from training.jax_programs import seconds_per_step
    models = {}
    for name, electra in (("ConvBERT", False), ("ELECTRA", True)):
        started = time.time()
        program, step_args, task = build(size, electra, args)
        built = time.time()
        _, step_args = seconds_per_step(program, step_args, 0, rounds=0)   # compiles
        models[name] = {"program": program, "args": step_args, "task": task,
                        "build_s": round(built - started, 1),
                        "compile_s": round(time.time() - built, 1), "times": []}
    for _ in range(args.rounds):                       # interleaved: ConvBERT, ELECTRA, ...
        for m in models.values():
            figures, m["args"] = seconds_per_step(m["program"], m["args"], args.calls,
                                                  warm_up=False)
            m["times"] += figures
    device = jax.devices()[0]
    peak = args.peak_tflops or peak_bf16_tflops(device.device_kind)
    rows = {}
    for name, m in models.items():
        state, block, num, schedule = m["args"]
        state, sums = m["program"](state, block, num, schedule)
        loss = float(sums["loss"]) / int(num)
        step_s = statistics.median(m["times"])
        seqs = args.batch / step_s
        flops = rtd_model_flops_per_sequence(m["task"].disc_config, m["task"].gen_config,
                                             args.seq)
        mfu = seqs * flops / (peak * 1e12) if peak else None
        rows[name] = {"step_ms": round(1e3 * step_s, 3), "sequences_per_second": round(seqs, 1),
                      "model_flops_per_sequence": flops,
                      "mfu": None if mfu is None else round(mfu, 4),
                      "round_step_ms": [round(1e3 * t, 3) for t in m["times"]],
                      "build_s": m["build_s"], "compile_s": m["compile_s"], "loss": loss}
        log(f"{name:8} {size:6} {device.device_kind:>18} b{args.batch} s{args.seq}: step "
            f"{1e3 * step_s:8.2f} ms {seqs:10.1f} seq/s  MFU "
            + ("n/a" if mfu is None else f"{100 * mfu:.1f}%")
            + f"  compile {m['compile_s']:.0f} s  loss {loss:.3f}")
    ratio = rows["ConvBERT"]["step_ms"] / rows["ELECTRA"]["step_ms"]
    log(f"ConvBERT / ELECTRA step time, {size}: {ratio:.3f}")
    return {"models": rows, "convbert_over_electra_step_time": round(ratio, 4)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model_size", default="small,base", help="comma list of sizes")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps_per_call", type=int, default=10,
                    help="steps inside one compiled call (the core's steps_per_loop)")
    ap.add_argument("--calls", type=int, default=5, help="timed calls per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per model")
    ap.add_argument("--fp32", action="store_true", help="fp32 compute instead of bf16")
    ap.add_argument("--peak_tflops", type=float, default=None)
    ap.add_argument("--tiny", action="store_true",
                    help="a tiny config, batch 4 x 32, 2 steps per call (CPU smoke test)")
    ap.add_argument("--output", default=None, help="write the figures as JSON here")
    ap.add_argument("--jax_cache_dir", default=None, help=JAX_CACHE_HELP)
    args = ap.parse_args(argv)
    started = time.time()
    load_before = os.getloadavg()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras
    if keras.backend.backend() != "jax":
        raise SystemExit("run with KERAS_BACKEND=jax")
    enable_compile_cache(args.jax_cache_dir)          # before the first compile
    import jax
    if args.tiny:
        args.batch, args.seq = min(args.batch, 4), min(args.seq, 32)
        args.steps_per_call, args.calls, args.rounds = 2, 1, 2
    sizes = [s for s in args.model_size.split(",") if s]
    print(f"# RTD pre-training throughput, JAX {jax.__version__}, "
          f"{'fp32' if args.fp32 else 'bf16'}{' (tiny config)' if args.tiny else ''}, batch "
          f"{args.batch} x {args.seq}, {args.steps_per_call} steps per call, median of "
          f"{args.rounds} rounds of {args.calls} calls; load before {load_before[0]:.2f}",
          flush=True)
    results = {"jax": jax.__version__, "device": jax.devices()[0].device_kind,
               "precision": "fp32" if args.fp32 else "bf16", "batch": args.batch,
               "seq": args.seq, "steps_per_call": args.steps_per_call, "tiny": args.tiny,
               "sizes": {}}
    for size in sizes:
        results["sizes"][size] = bench_size(size, args, log=lambda line: print(line, flush=True))
    results["load_before"] = load_before[0]
    results["load_after"] = os.getloadavg()[0]
    results["wall_seconds"] = round(time.time() - started, 1)
    print(f"# load after {results['load_after']:.2f}; whole process {results['wall_seconds']} s")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
