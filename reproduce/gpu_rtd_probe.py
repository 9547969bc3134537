"""Which learning-rate schedule does the GPU run's pre-training take? Short pre-trainings of one model
on the run's own step (reproduce/gpu_budget.py), variants of the schedule from the same initial
weights, each ending with how input-dependent the discriminator still is.

    KERAS_BACKEND=jax python -m reproduce.gpu_rtd_probe --model=electra --precision=bf16 \
        [--steps=10000] [--variants=recipe,warmup10000,warmup5000] [--output=F.json]

Each variant trains `--steps` steps of the gpu_budget recipe (reproduce/gpu_recipe.py: batch
128 x 128, generator 1/4, the bundle's examples in the run's order). The budget schedules, the
run's own form at the planned length `--steps` (give the number of steps the run's plan prints):

* `recipe`: the run's own schedule (reproduce/gpu_recipe.py: ELECTRA-small's official schedule
  for the first 80% of the run, then a linear cool-down to 0 at its last step): the one to check
  at the planned length;
* `warmup<W>[@<peak>]`: linear warm-up over W steps towards the peak (default the recipe's,
  5e-4), times a linear decay that reaches 0 at the last step (the run's earlier form, which
  peaked at 5e-4 x N / 40,000 for N below 20,000); a shorter warm-up has to earn its place.

With `--schedule_steps=N` (> 0) the variants of docs/RESULTS.md §13.1 instead, on the schedule of
an N-step run stopped after `--steps`:

* `run`: warm-up over 10% of the schedule (180 of 1,800 steps): the H100 run of §12;
* `warmup10x`: warm-up over the whole schedule: the lr climbs 10x slower;
* `lowlr`: `run` at a tenth of the peak lr.

At `--points` evenly spaced steps the held-out batch is scored on the device (generator
accuracy, discriminator AUC: pretrain/heldout_eval.DeviceScorer) and checked for collapse as the
run checks it (reproduce/gpu_stages.collapse: the variant stops there); at the end, the
discriminator's final hidden states on 16 held-out sequences: the mean cosine between two tokens'
states (near 1 = every token the same vector: a collapsed representation) and the spread of its
logits. The variants that did not collapse are ranked by their last held-out AUC ("ranking").
The precision is one per process (`--precision`): run bf16 and fp32 as two processes to compare
them.

    python -m reproduce.gpu_rtd_probe --plot=F.png --inputs=a.json,b.json    # one figure of them
"""
import argparse
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training.compile_cache import FLAG_HELP as JAX_CACHE_HELP, enable_compile_cache  # noqa: E402

# docs/RESULTS.md §13.1's variants of an N-step schedule: (warm-up share of N, lr scale)
SCHEDULE_VARIANTS = {"run": (0.1, 1.0), "warmup10x": (1.0, 1.0), "lowlr": (0.1, 0.1)}


class VariantError(ValueError):
    """A --variants entry the probe does not know; one line."""


def variant_schedule(name, steps, schedule_steps, peak_lr):
    """(warm-up steps, peak lr, schedule length) of variant `name`: `warmup<W>[@<peak>]` at the
    planned length `steps` (schedule_steps 0), or one of SCHEDULE_VARIANTS of a
    `schedule_steps` schedule."""
    if name == "recipe":
        return None         # the run's own schedule (reproduce/gpu_recipe.py), as it trains
    if schedule_steps:
        if name not in SCHEDULE_VARIANTS:
            raise VariantError(f"unknown variant {name!r} with --schedule_steps; one of "
                               f"{sorted(SCHEDULE_VARIANTS)}")
        share, scale = SCHEDULE_VARIANTS[name]
        return int(share * schedule_steps), peak_lr * scale, schedule_steps
    warmup, _, peak = name.partition("@")
    try:
        if not warmup.startswith("warmup"):
            raise ValueError
        return int(warmup[len("warmup"):]), float(peak) if peak else peak_lr, steps
    except ValueError:
        raise VariantError(f"unknown variant {name!r}: warmup<W>[@<peak>] (e.g. warmup10000, "
                           "warmup2000@3e-4), or with --schedule_steps one of "
                           f"{sorted(SCHEDULE_VARIANTS)}") from None


def ranking(variants):
    """The names of the variants that did not collapse, best last held-out AUC first."""
    alive = [(v["points"][-1]["disc_auc"], name) for name, v in variants.items()
             if v["points"] and not v.get("collapsed")]
    return [name for _, name in sorted(alive, reverse=True)]


def hidden_spread(pretrainer, heldout, examples=16, tokens=512):
    """{"hidden_cosine": mean cosine between the final hidden states of two different tokens,
    "disc_logit_std": std of the discriminator's logits}, over the non-padding tokens of the
    first `examples` held-out sequences (original ids)."""
    import numpy as np
    inputs = {k: np.asarray(heldout[k][:examples], np.int32)
              for k in ("input_ids", "input_mask", "segment_ids")}
    hidden = pretrainer.discriminator(inputs, training=False)
    logits = np.asarray(pretrainer.disc_head(hidden), np.float32)
    hidden = np.asarray(hidden, np.float32)
    real = inputs["input_mask"].astype(bool)
    states = hidden[real]
    states = states / (np.linalg.norm(states, axis=-1, keepdims=True) + 1e-9)
    pick = np.random.default_rng(0).choice(len(states), size=min(tokens, len(states)),
                                           replace=False)
    cos = states[pick] @ states[pick].T
    n = len(pick)
    return {"hidden_cosine": round(float((cos.sum() - np.trace(cos)) / (n * (n - 1))), 4),
            "disc_logit_std": round(float(logits[real].std()), 5)}


def plot_probes(paths, png):
    """One figure of probe results (the JSON files of `--output`): held-out discriminator AUC
    and the learning rate against the step, one line per model x precision x variant (its final
    hidden-state cosine in its label; one legend for both panels)."""
    from base import fileio
    from base.plots import pyplot, save_figure
    plt = pyplot()
    fig, (auc_ax, lr_ax) = plt.subplots(1, 2, figsize=(12, 4.2))
    styles = {"run": "-", "warmup10x": "--", "lowlr": ":"}     # §13.1's; the rest solid
    for path in paths:
        data = json.loads(fileio.read_text(path))
        for name, variant in data["variants"].items():
            steps = [p["step"] for p in variant["points"]]
            label = (f"{data['model']} {data['precision']} {name} (final hidden cosine "
                     f"{variant['hidden_cosine']:.2f})")
            line, = auc_ax.plot(steps, [p["disc_auc"] for p in variant["points"]],
                                styles.get(name, "-"), marker="o", label=label)
            lr_ax.plot(steps, [p["learning_rate"] for p in variant["points"]],
                       styles.get(name, "-"), marker="o", color=line.get_color(), label=label)
    auc_ax.set(title="Held-out discriminator AUC (0.5 = the prior)", xlabel="optimizer step",
               ylabel="ROC AUC (non-padding tokens)", ylim=(0.45, 1.0))
    lr_ax.set(title="Learning rate at the held-out points", xlabel="optimizer step",
              ylabel="learning rate", yscale="log")
    fig.tight_layout()
    # one legend for both panels (same lines, same colours), below them: no line hidden
    auc_ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(1.1, -0.16), ncol=3)
    save_figure(fig, png)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle_dir", default="gpu_bundle")
    ap.add_argument("--model", default="electra", choices=("electra", "convbert"))
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--steps", type=int, default=10_000,
                    help="steps per variant: the planned length of the run")
    ap.add_argument("--schedule_steps", type=int, default=0,
                    help="> 0: §13.1's variants (run, warmup10x, lowlr) of this long a schedule")
    ap.add_argument("--variants", default="recipe,warmup10000,warmup5000")
    ap.add_argument("--points", type=int, default=3)
    ap.add_argument("--heldout_examples", type=int, default=256)
    ap.add_argument("--collapse_margin", type=float, default=None,
                    help="stop a variant whose held-out AUC is at most 0.5 + this "
                         "(reproduce/gpu_stages.collapse; default the recipe's, 0.02; none with "
                         "--smoke)")
    ap.add_argument("--output", default=None)
    ap.add_argument("--smoke", action="store_true", help="the smoke recipe's tiny model (CPU)")
    ap.add_argument("--plot", default=None, metavar="PNG",
                    help="no training: plot the probe results named by --inputs into PNG")
    ap.add_argument("--inputs", default="", help="with --plot: comma-separated probe JSON files")
    ap.add_argument("--jax_cache_dir", default=None, help=JAX_CACHE_HELP)
    args = ap.parse_args(argv)
    if args.plot:
        plot_probes([p for p in args.inputs.split(",") if p], args.plot)
        return 0
    # here, not at import: importing this module (a test does) must not switch the backend of
    # the importing process and of every subprocess it starts
    os.environ.setdefault("KERAS_BACKEND", "jax")
    from training.settings import set_precision
    import numpy as np
    from base import fileio
    from data.pretraining_arrays import load_arrays
    from pretrain import heldout_eval
    from pretrain.hparams import train_settings
    from pretrain.jax_trainer import pretraining_core
    from reproduce.gpu_budget import Log
    from reproduce.gpu_recipe import GPU_BUDGET, SMOKE, pretrain_hparams
    from reproduce.gpu_stages import ArrayPretrainingTask, read_bundle
    from reproduce.gpu_stages import PretrainingCollapsed, collapse
    variants = args.variants.split(",")
    try:
        for name in variants:        # checked before anything is built
            variant_schedule(name, args.steps, args.schedule_steps, 1.0)
    except VariantError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    base = SMOKE if args.smoke else GPU_BUDGET
    recipe = dataclasses.replace(base, pretrain=dict(base.pretrain, precision=args.precision))
    if args.collapse_margin is not None:
        recipe = dataclasses.replace(recipe, collapse_margin=args.collapse_margin)
    set_precision(args.precision)
    log = Log()
    enable_compile_cache(args.jax_cache_dir, log=log)      # before the first compile
    b = read_bundle(args.bundle_dir)
    train = load_arrays(os.path.join(args.bundle_dir, b["pretrain_file"]))
    held = load_arrays(os.path.join(args.bundle_dir, b["heldout_file"]))
    heldout = heldout_eval.masked_heldout(
        {k: v[:args.heldout_examples] for k, v in held.items()}, **b["special_ids"])

    started = time.time()
    hp = pretrain_hparams(recipe, b, args.model, args.steps)
    task, core = pretraining_core(
        hp, [], hp.vocab_size, b["special_ids"], log=log,
        task=ArrayPretrainingTask(hp, [], hp.vocab_size, b["special_ids"]))
    task.arrays = train
    step = core.train_program()
    scorer = heldout_eval.device_scorer(task.pretrainer, heldout, hp.temperature)
    initial = [[np.asarray(v.value) for v in group] for group in core.task_variables()]
    out = {"model": args.model, "precision": args.precision, "steps": args.steps,
           "schedule_steps": args.schedule_steps, "batch": hp.train_batch_size,
           "peak_lr": hp.learning_rate, "build_s": round(time.time() - started, 1),
           "initial": hidden_spread(task.pretrainer, heldout), "variants": {}}
    try:
        import jax
        out["device"] = jax.devices()[0].device_kind
    except Exception:      # noqa: BLE001 - a label only
        pass
    for name in variants:
        schedule = variant_schedule(name, args.steps, args.schedule_steps, hp.learning_rate)
        for group, values in zip(core.task_variables(), initial):
            for variable, value in zip(group, values):
                variable.assign(value)
        if schedule is None:     # "recipe": the run's settings' schedule
            hp_v, length, cooldown = hp, hp.lr_schedule_steps, hp.lr_cooldown_steps
        else:                    # a `length`-step schedule, stopped after `steps`
            warmup, peak, length = schedule
            hp_v = dataclasses.replace(hp, learning_rate=peak, num_warmup_steps=warmup)
            cooldown = 0
        core.set_settings(dataclasses.replace(
            train_settings(hp_v), schedule_steps=length, cooldown_steps=cooldown,
            total_steps=args.steps, save_every=max(1, args.steps // args.points),
            log_every=max(1, args.steps // 10), steps_per_loop=min(25, max(1, args.steps // 10))))
        core.label = f"{args.model} {name}"
        points = []

        def score(step_done):
            metrics = scorer.evaluate()
            points.append({"step": step_done,
                           "learning_rate": float(core.schedule.host_value(step_done)),
                           **{k: round(float(v), 4) for k, v in metrics.items()}})
            log(f"{name} step {step_done}: held-out gen acc {metrics['gen_accuracy']:.3f}, "
                f"disc AUC {metrics['disc_auc']:.3f}")
            why = collapse([(p["step"], p["disc_auc"]) for p in points], args.steps, recipe)
            if why:
                raise PretrainingCollapsed(why)

        start = time.time()
        collapsed = None
        try:
            core.fit_task(program=step, after_save=score)
        except PretrainingCollapsed as e:
            collapsed = str(e)
            log(f"{name}: stopped, {collapsed}")
        spread = hidden_spread(task.pretrainer, heldout)
        out["variants"][name] = {"warmup_steps": hp_v.num_warmup_steps,
                                 "peak_lr": hp_v.learning_rate, "schedule_steps": length,
                                 "cooldown_steps": cooldown,
                                 "points": points, **spread, "collapsed": collapsed,
                                 "seconds": round(time.time() - start, 1)}
        log(f"{name}: {json.dumps(spread)}")
    out["ranking"] = ranking(out["variants"])
    log("not collapsed, best last held-out AUC first: " + (", ".join(out["ranking"]) or "none"))
    print(json.dumps(out))
    if args.output:
        fileio.write_text_atomic(args.output, json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
