"""Training-step speed (docs/PERFORMANCE.md P3), fp32 CPU, TF backend, graph mode (tf.function; the RTD
steps optionally under XLA with --rtd_jit_compile).

1. MLM step, ConvBERT-small, b16 s128: forward + cross-entropy + backward + AdamW (wd 0.01),
   dropout on; ours (`ConvBertMaskedLM`) vs transformers' `ConvBertForMaskedLM` (PyTorch eager,
   15% of positions labelled, -100 elsewhere), interleaved in one process, 2 threads each.
   Ours is timed twice: "full" computes the 30522-way logits at all 128 positions exactly as HF
   does (same work); "gathered" computes them only at the 20 masked positions per sequence
   (`masked_positions`, what the official ELECTRA/ConvBERT code does).
2. RTD step (generator + discriminator, `pretrain.electra_pretrainer.ElectraPretrainer`, total
   loss, backward, the driver's `AdamWeightDecay` with clipping): ConvBERT-small vs ELECTRA-small
   (head_ratio 1, conv_type "none"), both with the official generator sizing of the size (1/4 width for
   small, 1/3 for base),
   b16 s128 (or --rtd_batch).

    python benchmarks/train_step.py [--rounds 7] [--skip_hf] [--skip_rtd] [--rtd_jit_compile]

`--skip_mlm` times the RTD step alone: neither MLM model is built (nor PyTorch imported).

Threads: intra-op 2; TF inter-op 1 unless BENCH_INTER_OP says otherwise (BENCH_INTER_OP=0 is TF's
default, i.e. what `run_pretraining.py` runs with).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# libgomp threads spin-wait by default; on a shared, oversubscribed VM that makes PyTorch 5-10x
# slower than on a quiet one. Passive waiting keeps the comparison about the frameworks.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from benchmarks import common, json_out  # noqa: E402


def mlm_batch(rng, b, s, vocab, mask_frac=0.15, max_pred=20):
    import numpy as np
    ids = rng.integers(1000, vocab, (b, s)).astype("int32")
    positions = np.stack([np.sort(rng.choice(np.arange(1, s - 1), max_pred, replace=False))
                          for _ in range(b)]).astype("int32")
    labels = np.take_along_axis(ids, positions, axis=1)
    return ids, positions, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rtd_batch", type=int, default=16)
    ap.add_argument("--size", default="small")
    ap.add_argument("--rtd_impls", default="auto", help="conv implementations for the ConvBERT RTD step")
    ap.add_argument("--rtd_jit_compile", action="store_true",
                    help="compile the RTD steps with XLA (tf.function(jit_compile=True)), both models")
    ap.add_argument("--skip_mlm", action="store_true")
    ap.add_argument("--skip_hf", action="store_true")
    ap.add_argument("--skip_rtd", action="store_true")
    ap.add_argument("--tiny", action="store_true",
                    help="smoke test (benchmarks/refresh.py --tiny): one layer, hidden 64")
    json_out.add_argument(ap)
    args = ap.parse_args()
    common.header("training step: MLM ours vs transformers; RTD ConvBERT vs ELECTRA",
                  "python " + " ".join(sys.argv))
    import numpy as np
    import tensorflow as tf
    import keras
    common.set_threads(2)
    from model import ConvBertConfig, ConvBertMaskedLM

    cfg = ConvBertConfig.from_size(args.size)
    if args.tiny:
        cfg = cfg.replace(hidden_size=64, num_attention_heads=2, intermediate_size=128,
                          num_hidden_layers=1, embedding_size=32)
    b, s = args.batch, args.seq
    rng = np.random.default_rng(0)
    ids, positions, labels = mlm_batch(rng, b, s, cfg.vocab_size)
    runners = {}
    # --skip_mlm (the RTD step alone): neither MLM model is built, nor PyTorch imported.
    # The batch above is drawn all the same, so the RTD step's batch is the one it had.
    if not args.skip_mlm:
        mask = np.ones((b, s), "int32")
        keras.utils.set_random_seed(0)
        ours = ConvBertMaskedLM(cfg, conv_implementation="auto")
        opt = keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01)
        opt.build(ours.trainable_variables)
        inputs = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                  "segment_ids": tf.zeros((b, s), tf.int32)}
        pos_t, lab_t = tf.constant(positions), tf.constant(labels)

        def make_step(gathered):
            @tf.function
            def step():
                with tf.GradientTape() as tape:
                    if gathered:
                        # [B, P, V]
                        logits = ours(inputs, training=True, masked_positions=pos_t)
                    else:
                        logits = tf.gather(ours(inputs, training=True), pos_t, batch_dims=1)
                    loss = tf.reduce_mean(
                        tf.nn.sparse_softmax_cross_entropy_with_logits(lab_t, logits))
                grads = tape.gradient(loss, ours.trainable_variables)
                opt.apply_gradients(zip(grads, ours.trainable_variables))
                return loss
            return step

        runners = {"ours full": (lambda f=make_step(False): f().numpy()),
                   "ours gathered": (lambda f=make_step(True): f().numpy())}
        if not args.skip_hf:
            import torch
            import transformers

            from model.hf_convert import config_to_hf
            torch.set_num_threads(2)
            torch.manual_seed(0)
            hf_cfg = transformers.ConvBertConfig.from_dict(config_to_hf(cfg))
            hf = transformers.ConvBertForMaskedLM(hf_cfg).train()
            hf_opt = torch.optim.AdamW(hf.parameters(), lr=1e-4, weight_decay=0.01)
            hf_labels = torch.full((b, s), -100, dtype=torch.long)
            hf_labels.scatter_(1, torch.tensor(positions, dtype=torch.long),
                               torch.tensor(labels, dtype=torch.long))
            hf_in = {"input_ids": torch.tensor(ids, dtype=torch.long),
                     "attention_mask": torch.tensor(mask, dtype=torch.long),
                     "token_type_ids": torch.zeros((b, s), dtype=torch.long), "labels": hf_labels}

            def hf_step():
                hf_opt.zero_grad(set_to_none=True)
                loss = hf(**hf_in).loss
                loss.backward()
                hf_opt.step()
                return loss.item()
            runners["transformers"] = hf_step
    times = common.interleaved(runners, rounds=args.rounds, warmup=2)
    rows = []
    if runners:
        print(f"## MLM step, ConvBERT-{args.size}{' (tiny)' if args.tiny else ''}, b{b} s{s}, fp32")
        print(f"{'variant':16} {'median s':>9} {'min s':>7} {'speed-up vs HF':>15}  pass (>= 2x)")
    for name in runners:
        line = f"{name:16} {common.median(times[name]):9.3f} {min(times[name]):7.3f}"
        if "transformers" in times and name != "transformers":
            sp = 1.0 / common.ratio_of_medians(times, name, "transformers")
            line += f" {sp:15.2f}  {'yes' if sp >= 2 else 'no'}"
            rows.append({"step": "MLM", "size": args.size, "batch": b, "seq": s, "variant": name,
                         "median_s": common.median(times[name]), "speedup_vs_hf": sp})
        print(line, flush=True)

    if args.skip_rtd:
        json_out.write(args.json_out, rows)
        return
    from pretrain.generator_config import default_generator_hidden_size
    steps = {}
    disc_cfgs = {f"ConvBERT[{impl}]": (cfg, impl) for impl in args.rtd_impls.split(",")}
    disc_cfgs["ELECTRA"] = (cfg.replace(head_ratio=1, conv_type="none", num_groups=1), "auto")
    for name, (dcfg, impl) in disc_cfgs.items():
        # Official generator width per size (1/4 small, 1/3 base), as run_pretraining.py.
        steps[name], n_params = common.rtd_train_step(
            dcfg, default_generator_hidden_size(args.size), args.rtd_batch, s, rng,
            implementation=impl, jit_compile=True if args.rtd_jit_compile else None)
        print(f"# RTD {name}: {n_params:,d} trainable parameters (generator + discriminator + heads)")
    times = common.interleaved(steps, rounds=args.rounds, warmup=2)
    mode = "XLA (jit_compile)" if args.rtd_jit_compile else "TF graph"
    print(f"## RTD step, {args.size}{' (tiny)' if args.tiny else ''}, b{args.rtd_batch} s{s}, fp32, {mode}")
    print(f"{'model':22} {'median s':>9} {'min s':>7} {'/ ELECTRA':>10}  pass (<= 1)")
    for name in steps:
        line = f"{name:22} {common.median(times[name]):9.3f} {min(times[name]):7.3f}"
        if name != "ELECTRA":
            r = common.ratio_of_medians(times, name, "ELECTRA")
            line += f" {r:10.3f}  {'yes' if r <= 1 else 'no'}"
            rows.append({"step": "RTD", "size": args.size, "batch": args.rtd_batch, "seq": s,
                         "mode": mode, "model": name, "median_s": common.median(times[name]),
                         "electra_median_s": common.median(times["ELECTRA"]),
                         "ratio_vs_electra": r})
        print(line, flush=True)
    json_out.write(args.json_out, rows)


if __name__ == "__main__":
    main()
