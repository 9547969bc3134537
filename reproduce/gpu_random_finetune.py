"""Does fine-tuning learn on this machine? A randomly initialised ConvBERT-small fine-tuned on GLUE
tasks with the gpu_budget recipe's fine-tuning (reproduce/gpu_recipe.py: JAX, official settings,
SST-2 at 1 epoch, every run shortened to `--fraction` of its official steps as that run's plan
does), from the bundle's features. The random-init row of the GPU run on its own, in about a
minute and a half on an H100: the check that told the first H100 run's all-majority GLUE rows
(pre-trained encoders) from a fine-tuning path that does not learn (docs/RESULTS.md §12).

    KERAS_BACKEND=jax python -m reproduce.gpu_random_finetune --tasks=sst,sts [--fraction=0.35] \
        [--precision=bf16] [--bundle_dir=gpu_bundle] [--seed=1] [--max_steps=N] [--output=F.json] \
        [--smoke]

Prints one line per task (steps, seconds, dev metrics, how many distinct predictions) and their
JSON; `--output` writes it too. `--smoke`: the smoke recipe's tiny model and capped dev sets (the
CPU check of this script).
"""
import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training.compile_cache import FLAG_HELP as JAX_CACHE_HELP, enable_compile_cache  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle_dir", default="gpu_bundle")
    ap.add_argument("--tasks", default="sst,sts")
    ap.add_argument("--fraction", type=float, default=0.35,
                    help="of each task's official steps (the first H100 run's plan: 0.35)")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max_steps", type=int, default=0, help="cap (a quick check)")
    ap.add_argument("--output", default=None)
    ap.add_argument("--smoke", action="store_true", help="the smoke recipe's tiny model (CPU)")
    ap.add_argument("--jax_cache_dir", default=None, help=JAX_CACHE_HELP)
    args = ap.parse_args(argv)
    # here, not at import: importing this module (a test does) must not switch the backend of
    # the importing process and of every subprocess it starts
    os.environ.setdefault("KERAS_BACKEND", "jax")
    from training.settings import set_precision
    import numpy as np
    from base import fileio
    from finetune.finetuner import Trial
    from finetune.glue_task import GlueSets, glue_trial, to_predictions
    from finetune.jax_trainer import Finetuners, random_encoder_weights
    from model import ConvBertConfig
    from reproduce.gpu_budget import Log
    from reproduce.gpu_recipe import GPU_BUDGET, SMOKE, finetune_hparams
    from reproduce.gpu_stages import load_features, read_bundle
    tasks = args.tasks.split(",")
    base = SMOKE if args.smoke else GPU_BUDGET
    finetune = dict(base.finetune, precision=args.precision)
    if args.max_steps:
        finetune["max_train_steps"] = args.max_steps
    recipe = dataclasses.replace(base, finetune=finetune)
    log = Log()
    enable_compile_cache(args.jax_cache_dir, log=log)      # before the first compile
    bundle = read_bundle(args.bundle_dir)
    features = load_features(args.bundle_dir, bundle, recipe, tasks)
    set_precision(args.precision)
    config = ConvBertConfig.from_size(recipe.model_size, vocab_size=bundle["vocab_size"],
                                      **recipe.model_overrides)
    weights = random_encoder_weights(config, args.seed)
    finetuners = Finetuners(log=log)
    out = {"precision": args.precision, "fraction": args.fraction, "seed": args.seed,
           "tasks": {}}
    for task in tasks:
        train, dev, _ = features[task]       # dev cut to the recipe's max_eval_examples
        hp = finetune_hparams(recipe, task, fraction=args.fraction,
                              num_train_examples=len(train["input_ids"]))
        trial = Trial(1, args.seed, f"random {task}", "", "")
        start = time.time()
        dev_results, _ = glue_trial(task, hp, GlueSets(task, train, [(task, dev, None)], []),
                                    finetuners.get(config, task, hp), weights, trial,
                                    model_dir=None, log=log)   # nothing written
        metrics, logits = dev_results[task]
        preds = np.asarray(to_predictions(task, logits))
        out["tasks"][task] = {"steps": hp.max_train_steps, "seconds": round(time.time() - start, 1),
                              "dev": {k: round(float(v), 4) for k, v in metrics.items()},
                              "distinct_predictions": int(len(np.unique(preds)))}
        log(f"{task}: {json.dumps(out['tasks'][task])}")
    print(json.dumps(out))
    if args.output:
        fileio.write_text_atomic(args.output, json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
