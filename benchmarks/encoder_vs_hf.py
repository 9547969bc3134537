"""The toolkit's ConvBERT-base forward (TF backend) vs transformers' PyTorch ConvBertModel (docs/PERFORMANCE.md P1).

Random weights, eval / training=False, fp32, full attention mask, same process, interleaved rounds,
2 threads for both (torch.set_num_threads(2); TF intra-op 2, inter-op 1). Ours runs as a
`tf.function` (graph mode, no XLA: on CPU XLA is slower, see attention_block.py).

    python benchmarks/encoder_vs_hf.py [--rounds 7] [--shapes 8x128,1x512] [--impls auto]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# libgomp threads spin-wait by default; on a shared, oversubscribed VM that makes PyTorch 5-10x
# slower than on a quiet one. Passive waiting keeps the comparison about the frameworks.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from benchmarks import common  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="8x128,1x512")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", default="base")
    ap.add_argument("--impls", default="auto", help="our conv implementations to time")
    args = ap.parse_args()
    common.header(f"ConvBERT-{args.size} forward: ours (TF graph) vs transformers (PyTorch eager)",
                  "python " + " ".join(sys.argv))
    import numpy as np
    import tensorflow as tf
    import torch
    import transformers
    common.set_threads(2)
    torch.set_num_threads(2)

    from model import ConvBertConfig, ConvBertModel
    from model.hf_convert import config_to_hf
    cfg = ConvBertConfig.from_size(args.size)
    ours = {impl: ConvBertModel(cfg, conv_implementation=impl) for impl in args.impls.split(",")}
    fns = {impl: tf.function(lambda x, m=m: m(x, training=False)) for impl, m in ours.items()}
    hf_cfg = transformers.ConvBertConfig.from_dict(config_to_hf(cfg))
    hf = transformers.ConvBertModel(hf_cfg).eval()
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}, "
          f"tensorflow {tf.__version__}; threads 2/2")
    print(f"{'b':>2} {'s':>4} {'ours':24} {'ours ms':>9} {'HF ms':>9} {'ours/HF':>8}  pass (<= 0.5)")
    for shape in args.shapes.split(","):
        b, s = (int(v) for v in shape.split("x"))
        rng = np.random.default_rng(0)
        ids = rng.integers(1000, cfg.vocab_size, (b, s)).astype("int32")
        mask = np.ones((b, s), "int32")
        tf_in = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                 "segment_ids": tf.zeros((b, s), tf.int32)}
        pt_in = {"input_ids": torch.tensor(ids, dtype=torch.long),
                 "attention_mask": torch.tensor(mask, dtype=torch.long),
                 "token_type_ids": torch.zeros((b, s), dtype=torch.long)}

        def run_hf():
            with torch.inference_mode():
                hf(**pt_in).last_hidden_state.sum().item()
        runners = {f"ours[{impl}]": (lambda f=f: f(tf_in).numpy()) for impl, f in fns.items()}
        runners["hf"] = run_hf
        times = common.interleaved(runners, rounds=args.rounds, warmup=2)
        for impl in fns:
            name = f"ours[{impl}]"
            r = common.ratio_of_medians(times, name, "hf")
            print(f"{b:>2} {s:>4} {name:24} {1e3 * common.median(times[name]):9.1f} "
                  f"{1e3 * common.median(times['hf']):9.1f} {r:8.3f}  {'yes' if r <= 0.5 else 'no'}",
                  flush=True)


if __name__ == "__main__":
    main()
