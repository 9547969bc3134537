"""Before / after a change to the training loop: the same pre-training (RTD) and fine-tuning runs
from two checkouts, interleaved, medians (the goal: no speed regression).

    git worktree add /tmp/before <old commit>
    python benchmarks/training_core.py --before /tmp/before --after . [--rounds 5]

Each round runs, for each checkout in alternating order:
* `run_pretraining.py` on the built-in demo corpus (tiny ConvBERT, generator + discriminator,
  ELECTRA objective), `--steps` steps, one checkpoint + export at the end;
* with --glue_dir: `run_finetuning.py` on SST-2 from random weights, `--finetune_steps` steps.

Reported per checkout: whole-process wall time (what a user waits for: start-up, tracing, data,
checkpoints) and the loop's own throughput (pretraining_summary.json `sequences_per_second`,
which leaves out the first, tracing step), as medians over rounds, and after/before ratios. The
1-minute load average is printed before and after; a ratio taken above 1.0 does not count.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, cwd):
    env = dict(os.environ, PYTHONPATH=cwd, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[:2])} in {cwd} failed:\n{proc.stderr[-2000:]}")
    return wall


def pretrain(tree, out, steps):
    model_dir = os.path.join(out, "model")
    wall = run([sys.executable, "run_pretraining.py", f"--model_dir={model_dir}",
                f"--num_train_steps={steps}", f"--log_every_n_steps={steps}",
                f"--save_checkpoints_steps={steps}", "--keep_checkpoint_max=1", "--seed=1"],
               tree)
    with open(os.path.join(model_dir, "pretraining_summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    return {"pretrain_wall_s": wall, "pretrain_loop_seq_s": summary["sequences_per_second"]}


def finetune(tree, out, glue_dir, vocab, steps):
    hparams = {"model_hparam_overrides": {"hidden_size": 128, "embedding_size": 128,
                                          "num_hidden_layers": 2, "num_attention_heads": 2,
                                          "intermediate_size": 512},
               "train_batch_size": 32, "max_train_examples": 2000, "max_eval_examples": 200,
               "log_every_steps": steps}
    wall = run([sys.executable, "run_finetuning.py", "--data_dir", glue_dir, "--vocab_file",
                vocab, "--task_names", "sst", "--model_dir", os.path.join(out, "ft"),
                "--hparams", json.dumps(hparams), "--max_seq_length", "64",
                "--max_train_steps", str(steps)], tree)
    return {"finetune_wall_s": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="checkout of the old code")
    ap.add_argument("--after", default=HERE, help="checkout of the new code (default: this one)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--finetune_steps", type=int, default=40)
    ap.add_argument("--glue_dir", default=None, help="GLUE data (SST-2); omit to skip")
    ap.add_argument("--vocab_file", default=None)
    args = ap.parse_args()
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    print(f"command: python {' '.join(sys.argv)}")
    print(f"load average before: {os.getloadavg()}", flush=True)
    results = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for name, tree in trees.items():   # warm-up: demo data build, caches
            pretrain(tree, os.path.join(tmp, f"warm-{name}"), 2)
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                out = os.path.join(tmp, f"{name}-{r}")
                row = pretrain(trees[name], out, args.steps)
                if args.glue_dir:
                    row.update(finetune(trees[name], out, args.glue_dir, args.vocab_file,
                                        args.finetune_steps))
                results[name].append(row)
                print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                            row.items()), flush=True)
    print(f"load average after: {os.getloadavg()}")
    keys = list(results["before"][0])
    print(f"\n| measure (median of {args.rounds}) | before | after | after / before | "
          "median of the per-round ratios |")
    print("|---|---|---|---|---|")
    for key in keys:
        b = statistics.median(r[key] for r in results["before"])
        a = statistics.median(r[key] for r in results["after"])
        paired = statistics.median(ra[key] / rb[key] for ra, rb in
                                   zip(results["after"], results["before"]))
        print(f"| {key} | {b:.2f} | {a:.2f} | {a / b:.3f} | {paired:.3f} |")


if __name__ == "__main__":
    main()
