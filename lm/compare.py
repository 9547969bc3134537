"""Train several causal LMs on the same text with the same settings and compare them: the table
and the curves of docs/LANGUAGE_MODEL.md.

    python -m lm.compare --train_files=$WT2/wiki.valid.raw --eval_files=$WT2/wiki.test.raw \
        --vocab_file=vocab.txt --output_dir=runs/lm_compare \
        --models=lm_small_mixed,lm_small_transformer --seeds=1 \
        --hparams='{"seq_len": 128, "train_batch_size": 16, "num_train_steps": 2000}'

Every (model, seed) is one `run_lm.py` process into <output_dir>/<model>_seed<seed>, with the
same --hparams (plus model_config and seed): the same blocks in the same order for every model of
a seed. A rerun resumes unfinished runs and skips finished ones (run_lm.py resumes from its
checkpoints; a run whose lm_eval.json is at the last step is not started again).

Writes into --output_dir: lm_compare.md (per model: parameters, held-out perplexity per seed,
mean ± std, the last training loss, wall time; the rebuttal's WikiText-103 numbers beside them),
lm_compare.json (the numbers and every curve) and lm_compare_curves.png (training loss per log
window and held-out perplexity at every save, per run). Bad input prints one line `error: ...`
and exits with status 1.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from base import fileio  # noqa: E402

NAME = "lm_compare"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The authors' rebuttal, Table 3: WikiText-103 test perplexity per WORD of small LMs.
PAPER = {"lm_small_mixed": 32.95, "lm_small_transformer": 34.21}


class UserError(ValueError):
    """Bad arguments; one line."""


def run_dir(output_dir, model, seed):
    return fileio.join(output_dir, f"{os.path.basename(model).removesuffix('.json')}_seed{seed}")


def _read_json(path):
    return json.loads(fileio.read_text(path)) if fileio.exists(path) else None


def finished(directory, steps):
    scores = _read_json(fileio.join(directory, "lm_eval.json"))
    return scores is not None and scores.get("step") == steps


def train_one(args, model, seed, hparams, log):
    """One run_lm.py process (resumes); its output streams to <run dir>/log.txt and the last
    progress line to `log`."""
    directory = run_dir(args.output_dir, model, seed)
    if finished(directory, hparams["num_train_steps"]):
        log(f"{NAME}: {directory} is done; skipped")
        return
    fileio.makedirs(directory)
    command = [sys.executable, os.path.join(REPO_ROOT, "run_lm.py"),
               f"--train_files={args.train_files}", f"--eval_files={args.eval_files}",
               f"--vocab_file={args.vocab_file}", f"--model_dir={directory}",
               f"--hparams={json.dumps({**hparams, 'model_config': model, 'seed': seed})}"]
    log(f"{NAME}: training {model} seed {seed} -> {directory}")
    env = {**os.environ, "PYTHONPATH": REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(os.path.join(directory, "log.txt"), "a") if not fileio.is_url(directory) \
            else open(os.devnull, "w") as out:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        last = ""
        for line in process.stdout:
            out.write(line)
            out.flush()
            last = line.rstrip()
            if "step" in last or last.startswith(("eval", "error")):
                log(f"  {last}")
        if process.wait() != 0:
            raise UserError(f"run_lm.py failed for {model} seed {seed} ({directory}/log.txt): "
                            f"{last}")


def read_run(directory):
    """A finished run: {params, steps, wall_seconds, ppl, loss, train: {step, value}, heldout}."""
    from analysis.curves import event_files, read_event_scalars
    from lm.task import read_curve
    summary = _read_json(fileio.join(directory, "lm_summary.json"))
    scores = _read_json(fileio.join(directory, "lm_eval.json"))
    if summary is None or scores is None:
        raise UserError(f"{directory}: no lm_summary.json / lm_eval.json (not finished)")
    files = event_files(fileio.join(directory, "train"))
    losses = read_event_scalars(files).get("loss", {}) if files else {}
    curve = read_curve(directory)
    return {"model_dir": directory, "params": summary.get("trainable_parameters"),
            "steps": scores["step"], "wall_seconds": summary.get("wall_seconds"),
            "ppl": scores["ppl"], "loss": scores["loss"], "tokens": scores["tokens"],
            "seq_len": scores["seq_len"], "stride": scores["stride"],
            "final_train_loss": (summary.get("final") or {}).get("loss"),
            "train": {"step": sorted(losses), "value": [losses[s] for s in sorted(losses)]},
            "heldout": {"step": [p["step"] for p in curve], "value": [p["ppl"] for p in curve]}}


def mean_std(values):
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def markdown(doc):
    lines = [f"# Causal LM comparison ({', '.join(doc['models'])})", "",
             f"Train: `{doc['train_files']}`; held-out: `{doc['eval_files']}`. Same hparams for "
             f"every run: `{json.dumps(doc['hparams'], sort_keys=True)}`; seeds "
             f"{', '.join(map(str, doc['seeds']))}.",
             "Perplexity per WordPiece token (exp of the mean cross-entropy over every held-out "
             "token after the first; lm/task.py). The rebuttal's numbers are WikiText-103 test "
             "perplexities per word, of models trained far longer: not comparable in value, "
             "only in direction.", "",
             "| model | params | held-out ppl per seed | mean ± std | last train loss | wall time "
             "| rebuttal (WT-103, per word) |", "|---|---|---|---|---|---|---|"]
    for model, entry in doc["results"].items():
        runs = entry["runs"]
        per_seed = ", ".join(f"{r['ppl']:.2f}" for r in runs)
        mean, std = entry["ppl_mean"], entry["ppl_std"]
        wall = sum(r["wall_seconds"] or 0 for r in runs)
        train_loss = statistics.mean(r["final_train_loss"] for r in runs
                                     if r["final_train_loss"] is not None) \
            if any(r["final_train_loss"] is not None for r in runs) else float("nan")
        paper = PAPER.get(os.path.basename(model).removesuffix(".json"))
        spread = f"{mean:.2f} ± {std:.2f}" if len(runs) > 1 else f"{mean:.2f} (1 seed: no std)"
        lines.append(f"| {model} | {runs[0]['params']:,} | {per_seed} | {spread} | "
                     f"{train_loss:.3f} | {wall / 60:.1f} min | "
                     f"{'–' if paper is None else f'{paper:.2f}'} |")
    lines += ["", f"![curves]({NAME}_curves.png)", ""]
    return "\n".join(lines)


def plot(doc, path):
    from analysis.curves import smooth
    from base.plots import pyplot, save_figure
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (model, entry) in enumerate(doc["results"].items()):
        for j, run in enumerate(entry["runs"]):
            label = f"{model} seed {run['seed']}"
            style = dict(color=colors[i % len(colors)], alpha=1.0 if j == 0 else 0.6)
            train = run["train"]
            if train["step"]:
                left.plot(train["step"], smooth(train["value"], 5), label=label, **style)
            held = run["heldout"]
            if held["step"]:
                right.plot(held["step"], held["value"], marker="o", label=label, **style)
    left.set_xlabel("optimizer step")
    left.set_ylabel("training loss (nats per token, mean of 5 log windows)")
    left.set_title("Training loss")
    right.set_xlabel("optimizer step")
    right.set_ylabel("held-out perplexity per WordPiece token")
    right.set_yscale("log")
    right.set_title("Held-out perplexity at every save")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m lm.compare",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_files", required=True)
    parser.add_argument("--eval_files", required=True)
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--models", default="lm_small_mixed,lm_small_transformer")
    parser.add_argument("--seeds", default="1", help="Comma-separated seeds.")
    parser.add_argument("--hparams", default="{}", help="JSON object for every run (run_lm.py "
                        "--hparams; must set num_train_steps or take LMHParams' default).")
    parser.add_argument("--report_only", action="store_true",
                        help="Only rewrite the table and the plot from finished runs.")
    return parser.parse_args(argv)


def run(argv, log=print):
    args = parse_args(argv)
    from lm.task import LMError, make_hparams
    try:
        hparams = json.loads(args.hparams)
    except json.JSONDecodeError as e:
        raise UserError(f"--hparams is not JSON: {e}") from None
    if not isinstance(hparams, dict):
        raise UserError("--hparams must be a JSON object")
    try:
        hp = make_hparams(hparams)
    except LMError as e:
        raise UserError(f"--hparams: {e}") from None
    hparams = {**hparams, "num_train_steps": hp.num_train_steps}
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not models or not seeds:
        raise UserError("--models and --seeds must name at least one each")
    started = time.time()
    if not args.report_only:
        for seed in seeds:
            for model in models:
                train_one(args, model, seed, hparams, log)
    results = {}
    for model in models:
        runs = []
        for seed in seeds:
            record = read_run(run_dir(args.output_dir, model, seed))
            runs.append({"seed": seed, **record})
        mean, std = mean_std([r["ppl"] for r in runs])
        results[model] = {"ppl_mean": mean, "ppl_std": std, "runs": runs}
    doc = {"models": models, "seeds": seeds, "hparams": hparams,
           "train_files": args.train_files, "eval_files": args.eval_files,
           "vocab_file": args.vocab_file, "paper_wikitext103_word_ppl": PAPER,
           "results": results, "wall_seconds_this_call": time.time() - started}
    fileio.makedirs(args.output_dir)
    fileio.write_text_atomic(fileio.join(args.output_dir, f"{NAME}.json"),
                             json.dumps(doc, indent=1) + "\n")
    fileio.write_text_atomic(fileio.join(args.output_dir, f"{NAME}.md"), markdown(doc))
    plot(doc, fileio.join(args.output_dir, f"{NAME}_curves.png"))
    log(markdown(doc))
    return doc


def main(argv=None):
    try:
        run(sys.argv[1:] if argv is None else argv)
    except (UserError, fileio.FileIOError) as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        sys.exit(1)
    return 0


if __name__ == "__main__":
    main()
