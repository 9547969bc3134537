"""Paper Tables 1 and 2, Fig. 5 (rebuttal Table 4) and the convolution-only model: pre-train every
variant (a configs/ row) and fine-tune it on GLUE with the same data, steps and seeds, then one
table and one plot per study.

    python -m analysis.ablation --study table2|table1|kernel|conv_only|all \\
        --scale tiny|tiny_3ep|tiny_1k|small|base|smoke --corpus_dirs DIRS --glue_dir DIR \\
        --vocab_file FILE \\
        --output_dir DIR [--variants a,b] [--kernels 1,3,5,9] [--tasks mrpc,rte] [--seeds N] \\
        [--pretrain_steps N] [--no_heldout] [--pretrain_flags '...'] [--finetune_flags '...']

Studies (configs/README.md describes every row):

    table2     conventional / dynamic / span-based convolution (table2_small_*)
    table1     BERT, ELECTRA, +BNK, +GL, +Larger, ConvBERT rows grouped by size (table1_*); at
               scale small the small and medium-small rows, at base the base rows, at tiny and
               smoke all 13
    kernel     ConvBERT-small at every kernel size of --kernels (fig5_small_kernel{K})
    conv_only  attention only (ELECTRA-small) / mixed (ConvBERT-small) / convolution only
    all        the four

The stages are reproduce/pipeline.py's `Reproduction` (corpus -> shards -> pre-train -> held-out
curve -> fine-tune, each a subprocess of the toolkit's own driver, logged, skipped when finished,
so rerunning the command resumes), with one pre-trained model per variant. Scales are
reproduce/recipes.py's: `small` / `base` train the rows as they are, each with the recipe of its
own size (learning rate, batch, generator width), the scale's schedule (steps, warm-up) and its
fine-tuning recipe; `tiny` (2 CPU cores: each variant costs what one model of the tiny
reproduction costs) and `smoke` (the test; numbers mean nothing) shrink each row with
`small_compute_overrides` and train every variant with the scale's recipe. Identical models are
trained once: table2's span-based row, Fig. 5's K = 9 and ConvBERT-small are one run
(`canonical_runs`).

Writes into DIR, besides the stages' directories (shards/, pretrain/<run>/, finetune/<run>/,
logs/): ablation_<study>.md (the table in the paper's layout), ablation_<study>.json (every
number) and ablation_<study>.png (kernel: GLUE average vs kernel size; the tables: bar chart).
A cell is the median over fine-tuning seeds of the paper's metric (CoLA MCC, STS-B Spearman,
accuracy otherwise), with mean ± std; the GLUE average is the mean over the tasks run of each
task's median over seeds. Bad input prints one line `error: ...` and exits with status 1.
"""
import argparse
import dataclasses
import json
import os
import shlex
import sys
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from base.plots import pyplot, save_figure  # noqa: E402
from base import fileio  # noqa: E402

NAME = "ablation"
STUDIES = ("table2", "table1", "kernel", "conv_only")
DEFAULT_KERNELS = "1,3,5,7,9,11,13"   # Fig. 5's exact sizes are not confirmed (configs/README.md)
SIZE_ORDER = ("small", "medium-small", "base")

# (config name, row label, size group) in the paper's order.
TABLE1_ROWS = (
    ("table1_bert_small", "BERT-small (MLM)", "small"),
    ("table1_electra_small", "ELECTRA-small", "small"),
    ("table1_convbert_small_bnk", "+BNK", "small"),
    ("table1_convbert_small", "+BNK +SDConv (ConvBERT-small)", "small"),
    ("table1_electra_medium_small", "ELECTRA-medium-small", "medium-small"),
    ("table1_convbert_medium_small_bnk", "+BNK", "medium-small"),
    ("table1_convbert_medium_small_bnk_gl", "+BNK +GL", "medium-small"),
    ("table1_convbert_medium_small_bnk_gl_larger", "+BNK +GL +Larger", "medium-small"),
    ("table1_convbert_medium_small", "+BNK +GL +SDConv (ConvBERT-medium-small)", "medium-small"),
    ("table1_bert_base", "BERT-base (MLM)", "base"),
    ("table1_electra_base", "ELECTRA-base", "base"),
    ("table1_convbert_base_bnk", "+BNK", "base"),
    ("table1_convbert_base", "+BNK +SDConv (ConvBERT-base)", "base"),
)
TABLE2_ROWS = (
    ("table2_small_conventional", "conventional convolution", "small"),
    ("table2_small_dynamic", "dynamic convolution", "small"),
    ("table2_small_span_based", "span-based dynamic convolution", "small"),
)
CONV_ONLY_ROWS = (
    ("table1_electra_small", "attention only (ELECTRA-small)", "small"),
    ("table1_convbert_small", "mixed attention (ConvBERT-small)", "small"),
    ("ablation_small_conv_only", "convolution only", "small"),
)
TITLES = {"table2": "Table 2: convolution types (small)",
          "table1": "Table 1: ablation by size",
          "kernel": "Fig. 5 / rebuttal Table 4: kernel size (ConvBERT-small)",
          "conv_only": "Convolution-only model (small)"}
TASK_TITLES = {"cola": "CoLA (MCC)", "sst": "SST-2 (acc)", "mrpc": "MRPC (acc)",
               "sts": "STS-B (Spearman)", "rte": "RTE (acc)"}

# Fields kept from a row at every small-compute scale: what the studies compare.
STRUCTURAL_FIELDS = ("conv_type", "head_ratio", "conv_kernel_size", "num_groups",
                     "use_self_attention")
# Widths scaled at `tiny` by TINY_MODEL's value over ConvBERT-small's.
WIDTH_FIELDS = ("hidden_size", "embedding_size", "num_attention_heads", "intermediate_size")
# Pre-training hparams that belong to a row's own size at the paper's scales.
SIZE_RECIPE_KEYS = ("learning_rate", "train_batch_size", "generator_hidden_size")


class UserError(Exception):
    """A bad flag or input; printed as one `error: ...` line."""


@dataclasses.dataclass
class Variant:
    name: str          # configs/ row
    label: str         # the row of the paper's table
    group: str         # size group (Table 1) or "small"
    study: str
    kernel: int = None
    run: str = None    # pretrain/<run>, finetune/<run> (shared by identical models)


# ----------------------------------------------------------------------------- variants
def study_variants(study, scale, kernels):
    """The variants of one study, in the paper's order."""
    if study == "table2":
        rows = TABLE2_ROWS
    elif study == "conv_only":
        rows = CONV_ONLY_ROWS
    elif study == "table1":
        groups = {"small": ("small", "medium-small"), "base": ("base",)}.get(scale, SIZE_ORDER)
        rows = [r for r in TABLE1_ROWS if r[2] in groups]
    else:
        return [Variant(f"fig5_small_kernel{k}", f"K = {k}", "small", "kernel", kernel=k)
                for k in kernels]
    return [Variant(name, label, group, study) for name, label, group in rows]


def parse_kernels(text):
    try:
        kernels = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise UserError(f"--kernels {text!r}: expected odd integers like 1,3,5,9") from None
    if not kernels:
        raise UserError("--kernels is empty")
    return sorted(set(kernels))


def load_row(name):
    """The ConvBertConfig of a configs/ row; a one-line error naming the file when it is absent."""
    from model.config import CONFIGS_DIR, ConvBertConfig
    path = os.path.join(CONFIGS_DIR, name + ".json")
    if not fileio.isfile(path):
        hint = " (configs/ has the odd kernel sizes 1 to 27)" if name.startswith("fig5_") else ""
        raise UserError(f"{path}: no such config for variant {name!r}{hint}")
    return ConvBertConfig.from_json(path)


def small_compute_overrides(row, recipe):
    """The ConvBertConfig overrides that run configs/ row `row` at a small-compute recipe, or {}
    at the paper's scales (the row as it is).

    Kept from the row, at every scale: conv_type (Table 2), conv_kernel_size (Fig. 5),
    head_ratio (BNK), num_groups (GL) and use_self_attention (convolution-only), because these are
    what the studies compare.

    `tiny`: each width (hidden, embedding, attention heads, FFN) is the row's times TINY_MODEL's
    over ConvBERT-small's (1/2, 1/2, 1/2, 1/4, heads rounded down) and the depth is TINY_MODEL's
    2 layers. The small rows become exactly TINY_MODEL (+ their structural fields), and since
    every row shrinks by the same factors Table 1's size relation stays: small < medium-small
    (H 192, heads of 48) < +Larger (H 216) < base (H 384, E 384); BNK still halves the
    self-attention heads.
    `smoke`: the smoke recipe's own 1-layer, width-32 model with the structural fields (no size
    relation; its numbers mean nothing).
    """
    if recipe.scale != "smoke" and recipe.model_size != "tiny":  # tiny*: TINY_MODEL
        return {}
    structure = {field: getattr(row, field) for field in STRUCTURAL_FIELDS}
    if recipe.scale == "smoke":
        return {**recipe.model_overrides, **structure}
    from model.config import ConvBertConfig
    from pretrain.hparams import TINY_MODEL
    small = ConvBertConfig.from_size("small")
    widths = {field: max(1, int(getattr(row, field) * TINY_MODEL[field] / getattr(small, field)))
              for field in WIDTH_FIELDS}
    return {**widths, "num_hidden_layers": TINY_MODEL["num_hidden_layers"], **structure}


def pretrained_model(name, row, recipe):
    """reproduce.recipes.PretrainedModel of a variant: --model_size is the row's name (so the
    BERT rows keep their masked-LM objective, pretrain.hparams.ROW_DEFAULTS) and --hparams the
    scale's recipe (at small/base only its schedule: the row's own size sets lr, batch and
    generator width) plus the small-compute overrides."""
    from reproduce.recipes import PretrainedModel
    hparams = dict(recipe.pretrain)
    overrides = small_compute_overrides(row, recipe)
    if overrides:
        hparams["model_hparam_overrides"] = overrides
    else:
        hparams = {k: v for k, v in hparams.items() if k not in SIZE_RECIPE_KEYS}
    return PretrainedModel(name, hparams)


def canonical_runs(variants, recipe):
    """{variant name: (run name, model config dict, PretrainedModel)}. Identical models (config
    after scaling, and pre-training objective) share one run, named after the first of them in a
    fixed order (Table 1, Table 2, Fig. 5, conv-only) whatever study is asked, so commands for
    different studies on one --output_dir reuse each other's runs."""
    from pretrain.hparams import ROW_DEFAULTS
    order = [n for rows in (TABLE1_ROWS, TABLE2_ROWS) for n, _, _ in rows]
    order += [f"fig5_small_kernel{k}" for k in range(1, 28, 2)]
    order += [n for n, _, _ in CONV_ONLY_ROWS]
    wanted = {v.name for v in variants}
    order += sorted(wanted - set(order))          # not a configs/ row: load_row says so
    last = max(order.index(name) for name in wanted)
    seen, runs = {}, {}
    for name in order[:last + 1]:
        row = load_row(name)
        config = row.replace(**small_compute_overrides(row, recipe)).to_dict()
        key = json.dumps([config, ROW_DEFAULTS.get(name, {})], sort_keys=True)
        run = seen.setdefault(key, name)
        if name in wanted:
            runs[name] = (run, config, pretrained_model(name, row, recipe))
    return runs


# ----------------------------------------------------------------------------- flags and inputs
class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, exit 1 (argparse would print the usage, exit 2)
        raise UserError(message)


def parse_args(argv):
    p = _Parser(prog="python -m analysis.ablation",
                description="Pre-train + fine-tune the paper's ablation variants (Tables 1, 2, "
                            "Fig. 5, convolution-only) and tabulate GLUE dev scores.")
    p.add_argument("--study", required=True, choices=STUDIES + ("all",))
    p.add_argument("--scale", default="tiny",
                   help="tiny | tiny_3ep | tiny_1k | small | base | smoke (reproduce/recipes.py)")
    p.add_argument("--corpus_dirs", required=True, help="comma-separated directories of text files")
    p.add_argument("--glue_dir", required=True, help="<glue_dir>/<TASK>/{train,dev}.tsv")
    p.add_argument("--vocab_file", required=True, help="WordPiece vocab")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--variants", default=None, help="only these configs/ rows of the study")
    p.add_argument("--kernels", default=DEFAULT_KERNELS, help="kernel study: odd kernel sizes")
    p.add_argument("--tasks", default=None, help="GLUE tasks (default: those of cola,sst,mrpc,"
                   "sts,rte with a train split under --glue_dir)")
    p.add_argument("--seeds", type=int, default=None, help="fine-tuning seeds per task "
                   "(default: the recipe's)")
    p.add_argument("--pretrain_steps", type=int, default=None,
                   help="pre-training steps instead of the recipe's")
    p.add_argument("--num_shards", type=int, default=16, help="TFRecord shards per corpus "
                   "directory (the last of the first is held out)")
    p.add_argument("--build_processes", type=int, default=2, help="shard builder processes")
    p.add_argument("--seed", type=int, default=0, help="pre-training seed, first fine-tuning seed")
    p.add_argument("--no_heldout", action="store_true",
                   help="skip the held-out curve of each pre-training run")
    p.add_argument("--pretrain_flags", default="", help="extra run_pretraining.py flags")
    p.add_argument("--finetune_flags", default="", help="extra run_finetuning.py flags")
    return p.parse_args(argv)


def resolve(args):
    """(recipe, {study: [Variant]}, corpus dirs, tasks or None), every input checked before
    anything is written."""
    from reproduce.recipes import GLUE_TASKS, RecipeError, get_recipe
    try:
        recipe = get_recipe(args.scale)
        if args.pretrain_steps is not None:
            recipe = recipe.with_pretrain_steps(args.pretrain_steps)
    except RecipeError as e:
        raise UserError(str(e)) from None
    if args.seeds is not None:
        if args.seeds < 1:
            raise UserError(f"--seeds must be at least 1, got {args.seeds}")
        recipe = dataclasses.replace(recipe, num_trials=args.seeds)
    studies = STUDIES if args.study == "all" else (args.study,)
    kernels = parse_kernels(args.kernels)
    per_study = {s: study_variants(s, recipe.scale, kernels) for s in studies}
    if args.variants:
        wanted = [v.strip() for v in args.variants.split(",") if v.strip()]
        known = {v.name for vs in per_study.values() for v in vs}
        unknown = [v for v in wanted if v not in known]
        if unknown:
            raise UserError(f"--variants {', '.join(unknown)}: not in study {args.study} "
                            f"(choose from {', '.join(sorted(known))})")
        per_study = {s: [v for v in vs if v.name in wanted] for s, vs in per_study.items()}
        per_study = {s: vs for s, vs in per_study.items() if vs}
    corpus_dirs = [d.strip() for d in args.corpus_dirs.split(",") if d.strip()]
    if not corpus_dirs:
        raise UserError("--corpus_dirs is empty")
    for d in corpus_dirs:
        if not fileio.isdir(d):
            raise UserError(f"{d}: corpus directory not found (--corpus_dirs)")
    if not fileio.isdir(args.glue_dir):
        raise UserError(f"{args.glue_dir}: GLUE directory not found (--glue_dir)")
    if not fileio.isfile(args.vocab_file):
        raise UserError(f"{args.vocab_file}: vocab file not found (--vocab_file)")
    if fileio.exists(args.output_dir) and not fileio.isdir(args.output_dir):
        raise UserError(f"--output_dir {args.output_dir} is a file, not a directory")
    tasks = None
    if args.tasks:
        tasks = [t.strip().lower() for t in args.tasks.split(",") if t.strip()]
        bad = [t for t in tasks if t not in GLUE_TASKS]
        if bad or not tasks:
            raise UserError(f"--tasks {args.tasks!r}: choose from {', '.join(GLUE_TASKS)}")
        from finetune.glue.readers import task_file
        for t in tasks:
            for split in ("train", "dev"):
                path = str(task_file(args.glue_dir, t, split))
                if not fileio.isfile(path):
                    raise UserError(f"{path}: not found (task {t})")
    return recipe, per_study, corpus_dirs, tasks


# ----------------------------------------------------------------------------- results
def variant_result(repro, variant, config):
    """One variant's numbers: per-task summaries (reproduce.report.task_summary), the GLUE
    average of the medians and its pre-training record."""
    from finetune.glue.metrics import PAPER_METRIC
    from reproduce.report import pretraining_record, task_summary
    glue = {}
    for task in repro.tasks:
        summary = task_summary(repro.finetune_dir(variant.run), task)
        if summary is not None:
            metric = PAPER_METRIC.get(task, "accuracy")
            glue[task] = {"metric": metric, "summary": summary, "median": summary[metric]["median"]}
    medians = [glue[t]["median"] for t in repro.tasks if t in glue]
    record = pretraining_record(repro.pretrain_dir(variant.run)) or {}
    heldout = record.get("heldout") or [{}]
    model = {k: config[k] for k in ("hidden_size", "embedding_size", "num_hidden_layers",
                                    "num_attention_heads", "intermediate_size", *STRUCTURAL_FIELDS)}
    return {"name": variant.name, "label": variant.label, "group": variant.group,
            "kernel": variant.kernel, "run": variant.run, "model": model, "glue": glue,
            "average": sum(medians) / len(medians) if len(medians) == len(repro.tasks) else None,
            "pretraining": {"global_step": record.get("global_step"),
                            "trainable_parameters": record.get("trainable_parameters"),
                            "wall_seconds": record.get("wall_seconds"),
                            "final_window": record.get("final_window"),
                            "heldout_last": heldout[-1]}}


def _model_text(m):
    """"H 128, 2 layers, 1 attention + 1 sdconv K 9 heads of 64, G 1" (official head rule:
    heads / head_ratio of each kind, at least 1)."""
    per_kind = max(1, int(m["num_attention_heads"] / m["head_ratio"]))
    kinds = [f"{per_kind} attention"] if m["use_self_attention"] else []
    if m["conv_type"] != "none":
        kinds.append(f"{per_kind} {m['conv_type']} K {m['conv_kernel_size']}")
    layers = m["num_hidden_layers"]
    return (f"H {m['hidden_size']}, {layers} layer{'s' * (layers != 1)}, {' + '.join(kinds)} heads "
            f"of {m['hidden_size'] // m['num_attention_heads']}, G {m['num_groups']}")


def markdown(doc):
    tasks = doc["tasks"]
    lines = [f"# {TITLES[doc['study']]}", "",
             f"Scale `{doc['scale']}`: {doc['pretrain_steps']} pre-training steps, "
             f"{doc['num_trials']} fine-tuning seeds per task. Cell: median over seeds (mean ± "
             "std) of CoLA MCC, STS-B Spearman, accuracy otherwise (dev, ×100). Avg: the mean "
             "over the tasks run of each task's median over seeds.", ""]
    first = "K" if doc["study"] == "kernel" else ("size | variant" if doc["study"] == "table1"
                                                  else "variant")
    lines.append(f"| {first} | model | trainable params (pre-training) | "
                 + " | ".join(TASK_TITLES.get(t, t) for t in tasks) + " | Avg |")
    lines.append("|---" * (first.count("|") + len(tasks) + 4) + "|")
    for v in doc["variants"]:
        cells = []
        for t in tasks:
            entry = v["glue"].get(t)
            if entry is None:
                cells.append("–")
                continue
            s = entry["summary"][entry["metric"]]
            cells.append(f"{s['median']:.1f} ({s['mean']:.1f} ± {s['std']:.1f})")
        head = (str(v["kernel"]) if doc["study"] == "kernel"
                else f"{v['group']} | {v['label']}" if doc["study"] == "table1" else v["label"])
        params = v["pretraining"]["trainable_parameters"]
        avg = "–" if v["average"] is None else f"{v['average']:.1f}"
        lines.append(f"| {head} | {_model_text(v['model'])} | "
                     f"{'–' if params is None else f'{params:,}'} | " + " | ".join(cells)
                     + f" | {avg} |")
    shared = [v for v in doc["variants"] if v["run"] != v["name"]]
    if shared:
        lines += ["", "Same model, one run: " + "; ".join(f"`{v['name']}` = `{v['run']}`"
                                                          for v in shared) + "."]
    lines += ["", f"Command: `{doc['command']}`", ""]
    return "\n".join(lines)


def plot_kernel(doc, path):
    """GLUE average vs kernel size, and each task's median as a thinner line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    rows = [v for v in doc["variants"] if v["glue"]]
    ks = [v["kernel"] for v in rows]
    for t in doc["tasks"]:
        ax.plot(ks, [v["glue"][t]["median"] if t in v["glue"] else float("nan") for v in rows],
                marker=".", linestyle="--", alpha=0.6, label=TASK_TITLES.get(t, t))
    ax.plot(ks, [float("nan") if v["average"] is None else v["average"] for v in rows],
            marker="o", color="black", linewidth=2, label="GLUE average (of medians)")
    ax.set_xticks(ks)
    ax.set_xlabel("convolution kernel size K (tokens)")
    ax.set_ylabel("GLUE dev score (×100, median over seeds)")
    ax.set_title(f"Kernel size, ConvBERT-small at scale {doc['scale']} "
                 f"({doc['num_trials']} seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def plot_bars(doc, path):
    """Grouped bars: per variant, each task's median and the GLUE average."""
    plt = pyplot()
    import numpy as np
    rows = doc["variants"]
    series = [(t, TASK_TITLES.get(t, t)) for t in doc["tasks"]] + [("avg", "GLUE average")]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.4, 1.3 * len(rows) + 2), 4.6))
    x = np.arange(len(rows))
    for i, (key, title) in enumerate(series):
        values = [(v["average"] if key == "avg" else v["glue"].get(key, {}).get("median"))
                  for v in rows]
        ax.bar(x + (i - (len(series) - 1) / 2) * width,
               [np.nan if y is None else y for y in values], width, label=title,
               color="black" if key == "avg" else None)
    labels = [textwrap.fill((f"{v['group']}: " if doc["study"] == "table1" else "") + v["label"],
                            20) for v in rows]
    ax.set_xticks(x, labels, fontsize=7, rotation=0 if len(rows) <= 5 else 30,
                  ha="center" if len(rows) <= 5 else "right")
    ax.set_xlabel("variant")
    ax.set_ylabel("GLUE dev score (×100, median over seeds)")
    ax.set_title(f"{TITLES[doc['study']]}, scale {doc['scale']} ({doc['num_trials']} seeds)")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    save_figure(fig, path)


def write_study(output_dir, doc):
    stem = fileio.join(output_dir, f"{NAME}_{doc['study']}")
    (plot_kernel if doc["study"] == "kernel" else plot_bars)(doc, stem + ".png")
    fileio.write_text_atomic(stem + ".json", json.dumps(doc, indent=2) + "\n")
    fileio.write_text_atomic(stem + ".md", markdown(doc))
    return [stem + ".md", stem + ".json", stem + ".png"]


# ----------------------------------------------------------------------------- entry point
def run(argv):
    args = parse_args(argv)
    recipe, per_study, corpus_dirs, tasks = resolve(args)
    variants = [v for vs in per_study.values() for v in vs]
    runs = canonical_runs(variants, recipe)
    for v in variants:
        v.run = runs[v.name][0]
    pretrained = {run: spec for run, _, spec in runs.values()}
    from reproduce.pipeline import Reproduction
    repro = Reproduction(recipe, args.output_dir, corpus_dirs, args.glue_dir,
                         vocab_file=args.vocab_file, num_shards=args.num_shards,
                         build_processes=args.build_processes, models=list(pretrained),
                         tasks=tasks, seed=args.seed,
                         pretrain_flags=shlex.split(args.pretrain_flags),
                         finetune_flags=shlex.split(args.finetune_flags),
                         pretrained=pretrained, heldout_curves=not args.no_heldout)
    print(f"ablation {args.study}, scale {recipe.scale}: {len(variants)} variant(s), "
          f"{len(pretrained)} run(s): {', '.join(pretrained)}", flush=True)
    repro.run(report=False)
    command = "python -m analysis.ablation " + " ".join(shlex.quote(a) for a in argv)
    paths = []
    for study, study_vars in per_study.items():
        doc = {"study": study, "scale": recipe.scale, "tasks": list(repro.tasks),
               "num_trials": recipe.num_trials,
               "pretrain_steps": recipe.pretrain["num_train_steps"],
               "glue_average": "mean over the tasks run of each task's median over seeds",
               "command": command,
               "variants": [variant_result(repro, v, runs[v.name][1]) for v in study_vars]}
        paths += write_study(args.output_dir, doc)
        print(markdown(doc))
    print("wrote " + ", ".join(paths))
    return 0


def main(argv=None):
    """Exit status: 0, or 1 with one line `error: ...` for a bad flag, input or failed stage."""
    from base.command import quiet_tensorflow
    quiet_tensorflow()   # first: no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        from data.errors import DataError
        from reproduce.pipeline import ReproductionError
        try:
            return run(argv)
        except (ReproductionError, DataError) as e:
            raise UserError(str(e) or type(e).__name__) from None
    except UserError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
