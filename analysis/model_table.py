"""Paper Tables 1 and 7: parameters and FLOPs of every configs/ row, the paper's figures beside ours.

    python -m analysis.model_table --output_dir DIR [--seq_len 128]

Writes into DIR: model_table.md (Table 1 by size, Table 2, Fig. 5, the other configs/ files and
Table 7), model_table.json (every number) and model_table.png (parameters vs pre-training FLOPs,
one marker per row).

Numbers come from model/flops.py (ELECTRA's counting convention, see its docstring):
* params: the discriminator encoder (`encoder_parameters`, = `ConvBertModel(config).count_params()`);
* inference FLOPs: one example of `--seq_len` tokens through the encoder and the discriminator's
  binary head (ELECTRA's `get_infer_flops`);
* pre-training FLOPs of a row: the recipe `run_pretraining.py --model_size=<row>` would use
  (pretrain/hparams.py: the nearest official size's batch, 1M steps, length 128 and generator
  width; BERT rows masked-LM only, `ROW_DEFAULTS`);
* Table 7: the paper's published recipes (`model/flops.py` `RECIPES`, as `scripts/flops.py` prints
  them; ELECTRA-base is ELECTRA's 766k steps at length 512).
Paper figures (analysis/paper.py, model/flops.py RECIPES) are printed beside ours with ✓ when ours
rounds to them at the paper's rounding (params: whole millions; FLOPs: two significant digits).
"""
import argparse
import json
import sys

from analysis.paper import TABLE1_PARAMS_M
from base.plots import pyplot, save_figure
from base import fileio

NAME = "model_table"
SIZES = ("small", "medium-small", "base")
SECTIONS = (("table1", "Table 1: ablation, by size"),
            ("table2", "Table 2: convolution types (small)"),
            ("fig5", "Fig. 5: kernel size (small)"),
            ("other", "Other configs/ files"))


class UserError(Exception):
    """A bad flag or output path; printed as one `error: ...` line."""


def section_of(name):
    prefix = name.split("_", 1)[0]
    return prefix if prefix in ("table1", "table2", "fig5") else "other"


def describe(cfg):
    """A short architecture string: width, heads by kind, FFN, groups."""
    heads = f"{cfg.num_self_attention_heads} attn" if cfg.use_self_attention else "0 attn"
    if cfg.conv_type != "none":
        heads += f" + {cfg.num_conv_heads} {cfg.conv_type} K{cfg.conv_kernel_size}"
    return (f"H {cfg.hidden_size}, E {cfg.embedding_size}, heads {heads} of {cfg.head_size}, "
            f"FFN {cfg.intermediate_size}, G {cfg.num_groups}")


def paper_rounds_to(ours, paper, digits):
    """True when `ours` printed at the paper's rounding equals the paper's figure."""
    return float(f"{ours:.{digits - 1}e}") == float(f"{paper:.{digits - 1}e}")


def row_numbers(name, seq_len):
    """Params and FLOPs of the configs/ row `name` with the recipe its pre-training would use."""
    from model import flops
    from model.config import ConvBertConfig
    from pretrain.hparams import make_hparams, recipe_size
    cfg = ConvBertConfig.from_name(name)
    hp = make_hparams(name)
    recipe = dict(size=recipe_size(cfg), batch=hp.train_batch_size, steps=hp.num_train_steps,
                  seq_len=hp.max_seq_length,
                  objective="electra" if hp.electra_objective else "mlm",
                  generator_hidden_size=hp.generator_hidden_size if hp.electra_objective else None)
    if hp.electra_objective:
        train = flops.pretrain_flops(cfg, hp.train_batch_size, hp.num_train_steps,
                                     hp.max_seq_length, hp.generator_hidden_size)["total"]
    else:
        train = flops.train_flops(cfg, hp.train_batch_size, hp.num_train_steps, hp.max_seq_length,
                                  head="mlm")
    params = flops.encoder_parameters(cfg)
    paper = TABLE1_PARAMS_M.get(name)
    return dict(name=name, section=section_of(name), architecture=describe(cfg),
                config=json.loads(cfg.to_json()), params=params, paper_params_m=paper,
                params_match=None if paper is None else round(params / 1e6) == paper,
                inference_flops=seq_len * flops.forward_flops_per_token(cfg, seq_len),
                pretrain_flops=train, recipe=recipe)


def table7(rows):
    """The paper's recipes (model/flops.py RECIPES, via `summarize` as scripts/flops.py prints them),
    each with the configs/ row of the same architecture and that row's paper parameter figure."""
    from model import flops
    from model.config import ConvBertConfig

    def row_for(config):  # rows are in table order: Table 1 first; RECIPES are all ELECTRA-objective
        same = [r for r in rows if ConvBertConfig(**r["config"]) == config]
        return ([r for r in same if r["recipe"]["objective"] == "electra"] + same + [None])[0]
    out = []
    for recipe_name, recipe in flops.RECIPES.items():
        s = flops.summarize(recipe_name)
        row = row_for(recipe["config"]())
        paper_m = row["paper_params_m"] if row else None
        out.append(dict(
            recipe=recipe_name, configs_row=row["name"] if row else None, params=s.parameters,
            paper_params_m=paper_m,
            params_match=None if paper_m is None else round(s.parameters / 1e6) == paper_m,
            forward_flops_per_token=s.forward_flops_per_token,
            inference_flops=recipe["seq_len"] * s.forward_flops_per_token,
            pretrain_flops=s.pretrain_flops, paper_pretrain_flops=s.paper,
            pretrain_match=None if s.paper is None else paper_rounds_to(s.pretrain_flops, s.paper, 2),
            batch=recipe["batch_size"], steps=recipe["steps"], seq_len=recipe["seq_len"],
            generator_hidden_size=recipe["generator_hidden_size"]))
    return out


def collect(seq_len):
    from pretrain.hparams import config_names
    names = config_names()
    order = {name: i for i, name in enumerate(TABLE1_PARAMS_M)}  # Table 1 in the paper's order
    names.sort(key=lambda n: ([s for s, _ in SECTIONS].index(section_of(n)),
                              order.get(n, len(order))))
    rows = [row_numbers(name, seq_len) for name in names]
    return {"seq_len": seq_len, "rows": rows, "table7": table7(rows)}


def _flops(x):
    """1.26e18 (two decimals, no "+")."""
    return f"{x:.2e}".replace("e+", "e")


def _mark(match):
    return "" if match is None else ("✓" if match else "✗")


def _recipe_text(recipe):
    gen = (f", generator {recipe['generator_hidden_size']:.3g}" if recipe["generator_hidden_size"]
           else "")
    return (f"{recipe['objective']}: {recipe['batch']} × {recipe['steps']:,} steps × "
            f"{recipe['seq_len']}{gen}")


def markdown(result, command):
    seq_len = result["seq_len"]
    lines = ["# Parameters and FLOPs of every configs/ row (paper Tables 1 and 7)", "",
             f"Command: `{command}`  ",
             "Counts: model/flops.py (ELECTRA's convention). Params = discriminator encoder; "
             f"inference FLOPs = one example of {seq_len} tokens (encoder + binary head); "
             "pre-training FLOPs = the row's recipe in pretrain/hparams.py (objective: batch × "
             "steps × length, generator width). ✓/✗: ours at the paper's rounding (whole millions).",
             ""]
    header = (f"| row | architecture | params (ours) | paper | | inference GFLOPs (s={seq_len}) | "
              "pre-training FLOPs | recipe |")
    for section, title in SECTIONS:
        rows = [r for r in result["rows"] if r["section"] == section]
        if not rows:
            continue
        lines += [f"## {title}", ""]
        groups = ([(size, [r for r in rows if r["recipe"]["size"] == size]) for size in SIZES]
                  if section == "table1" else [(None, rows)])
        for size, group in groups:
            if not group:
                continue
            if size:
                lines += [f"### {size}", ""]
            lines += [header, "|---|---|---:|---:|---|---:|---:|---|"]
            for r in group:
                paper = f"{r['paper_params_m']}M" if r["paper_params_m"] is not None else "–"
                lines.append(f"| `{r['name']}` | {r['architecture']} | {r['params']:,} | {paper} | "
                             f"{_mark(r['params_match'])} | {r['inference_flops'] / 1e9:.3f} | "
                             f"{_flops(r['pretrain_flops'])} | {_recipe_text(r['recipe'])} |")
            lines.append("")
    lines += ["## Table 7: the paper's recipes (model/flops.py RECIPES, as scripts/flops.py)", "",
              "| recipe | configs/ row | params (ours) | paper | | forward FLOPs/token | "
              "inference GFLOPs (its length) | pre-training FLOPs (ours) | paper | | recipe |",
              "|---|---|---:|---:|---|---:|---:|---:|---:|---|---|"]
    for r in result["table7"]:
        paper_m = f"{r['paper_params_m']}M" if r["paper_params_m"] is not None else "–"
        paper_f = (f"{r['paper_pretrain_flops']:.1e}".replace("e+", "e")
                   if r["paper_pretrain_flops"] else "–")
        gen = f", generator {r['generator_hidden_size']:.3g}"
        lines.append(f"| {r['recipe']} | `{r['configs_row'] or '–'}` | {r['params']:,} | {paper_m} | "
                     f"{_mark(r['params_match'])} | {r['forward_flops_per_token'] / 1e6:.2f}M | "
                     f"{r['inference_flops'] / 1e9:.2f} (s={r['seq_len']}) | "
                     f"{_flops(r['pretrain_flops'])} | {paper_f} | {_mark(r['pretrain_match'])} | "
                     f"{r['batch']} × {r['steps']:,} × {r['seq_len']}{gen} |")
    lines += ["", "Pre-training FLOPs ✓ = equal at the paper's two significant digits. Why some "
              "parameter counts miss the paper's: configs/README.md, 'Where the counts differ'."]
    return "\n".join(lines) + "\n"


def _short(name):
    """Point label: the row's name without its section prefix ("fig5_small_kernel9" -> "K9")."""
    for prefix, short in (("fig5_small_kernel", "K"), ("table2_small_", "T2 "), ("table1_", "")):
        if name.startswith(prefix):
            return short + name[len(prefix):]
    return name


def _place_labels(ax, markers, labels):
    """Each label beside its marker, at the first of eight spots that covers no marker, no earlier
    label and not the legend (display coordinates, measured by the renderer); the last spot if
    none is free. labels: [(x, y, text, color)]."""
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    from matplotlib.transforms import Bbox
    taken = [Bbox.from_bounds(px - 5, py - 5, 10, 10) for px, py in ax.transData.transform(markers)]
    legend = ax.get_legend()
    if legend is not None:
        taken.append(legend.get_window_extent(renderer))
    spots = [(dx, dy, "left" if dx > 0 else "right", "bottom" if dy > 0 else "top")
             for dy in (3, -3, 12, -12) for dx in (5, -5)]
    for x, y, text, color in labels:
        for dx, dy, ha, va in spots:
            note = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points",
                               fontsize=7, color=color, ha=ha, va=va)
            box = note.get_window_extent(renderer)
            if not any(box.overlaps(t) for t in taken) or (dx, dy) == spots[-1][:2]:
                break
            note.remove()
        taken.append(box)


def plot(result, path):
    """Parameters vs pre-training FLOPs, one marker per configs/ row, one panel per recipe size
    (the sizes are an order of magnitude apart). Fig. 5 rows are joined by a line; older files
    that copy a row exactly are not drawn twice."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(SIZES), figsize=(16, 5.8))
    styles = {"table1": ("o", "tab:blue"), "table2": ("s", "tab:green"),
              "fig5": ("^", "tab:orange"), "other": ("x", "tab:gray")}
    drawn = set()
    for ax, size in zip(axes, SIZES):
        markers, labels = [], []
        for section, title in SECTIONS:
            rows = []
            for r in result["rows"]:
                key = json.dumps([r["config"], r["recipe"]], sort_keys=True)
                if r["section"] == section and r["recipe"]["size"] == size:
                    if section != "other" or key not in drawn:
                        rows.append(r)
                    drawn.add(key)
            if not rows:
                continue
            marker, color = styles[section]
            xs, ys = [r["pretrain_flops"] / 1e18 for r in rows], [r["params"] / 1e6 for r in rows]
            label = f"{title}: K {_short(rows[0]['name'])[1:]}…{_short(rows[-1]['name'])[1:]}, " \
                "params rise with K" if section == "fig5" else title
            ax.scatter(xs, ys, marker=marker, color=color, label=label, s=40, alpha=0.85, zorder=3)
            if section == "fig5":
                ax.plot(xs, ys, color=color, lw=0.8, zorder=2)
            markers += zip(xs, ys)
            if section != "fig5":  # Fig. 5's 14 rows sit on one short line: the legend names it
                labels += [(x, y, _short(r["name"]), color) for r, x, y in zip(rows, xs, ys)]
        ax.set_xlabel("pre-training FLOPs (×10¹⁸; the row's recipe, ELECTRA's count)")
        ax.set_ylabel("parameters, discriminator encoder (millions)")
        ax.set_title(f"{size} recipe")
        ax.grid(True, alpha=0.3)
        ax.margins(x=0.3, y=0.12)
        ax.legend(loc="best", fontsize=7)
        _place_labels(ax, markers, labels)
    fig.suptitle("configs/ rows: parameters vs pre-training FLOPs (model/flops.py)")
    save_figure(fig, path)


def main(argv=None):
    from base.command import quiet_tensorflow
    quiet_tensorflow()   # first: no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--seq_len", type=int, default=128,
                    help="tokens per example of the inference FLOPs (1..512)")
    args = ap.parse_args(argv)
    try:
        if not 1 <= args.seq_len <= 512:
            raise UserError(f"--seq_len must be in 1..512 (the position table), got {args.seq_len}")
        if fileio.exists(args.output_dir) and not fileio.isdir(args.output_dir):
            raise UserError(f"--output_dir {args.output_dir} is a file, not a directory")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    args_text = " ".join(argv if argv is not None else sys.argv[1:])
    command = f"python -m analysis.model_table {args_text}"
    result = collect(args.seq_len)
    result["command"] = command
    text = markdown(result, command)
    print(text)
    fileio.write_text_atomic(fileio.join(args.output_dir, NAME + ".json"),
                             json.dumps(result, indent=2) + "\n")
    plot(result, fileio.join(args.output_dir, NAME + ".png"))
    fileio.write_text_atomic(fileio.join(args.output_dir, NAME + ".md"), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
