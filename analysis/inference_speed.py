"""Paper Table 9 (rebuttal Table 2): the mixed-attention block vs the self-attention block.

    python -m analysis.inference_speed --output_dir DIR [--shapes 1x128,8x128,1x512,8x512]
        [--rounds 7] [--size base] [--hidden H --heads N] [--backend_mode graph|xla|eager|jax]
        [--bf16]

Writes into DIR: inference_speed.md (the table, the paper's rows beside ours),
inference_speed.json (every number), inference_speed.png (ms/sample per shape, both blocks).

The two blocks and their timing are benchmarks/attention_block.py's (one implementation): both are
BERT's `BertAttention`, x -> LayerNorm(x + Dense_H(attention(x))), dropout off; self-attention =
every head self-attention, mixed = ConvBERT (head_ratio 2: H/2 self-attention heads ‖ H/2 span-based
dynamic convolution heads, K 9). Timing: one process, interleaved rounds after warm-up, medians;
the ratio is the median of per-round ratios. `os.getloadavg()` is printed before and after; when
the 1-minute load *before* the run is above 1.0 (other jobs share the cores) the ratios are marked
"does not count" (the load after includes this run's own threads, so it is shown, not judged).

GFLOPs/sample = model/flops.py `attention_flops` (ELECTRA's convention: 2 per multiply-add, plus
element-wise ops) per token x sequence length. It counts what the timed block runs: Q/K/V
projections and biases, scores, softmax, scale, weighted sum, the convolution branch (span key
depthwise + pointwise, q ⊙ key, kernel generator + softmax over K, conv-value projection, the
convolution) and the output dense + bias + residual + LayerNorm. A second column leaves the output
dense part out (the "self part" only). The paper gives 26.5 vs 19.3 GFLOPs without a sequence
length: its ratio (0.728) is nearest ours at length 512 *without* the output dense (0.740; 0.789
with it, 0.86/0.81 at 128), but its absolute figures are about 8x (with) / 10x (without) our
per-sample count at 512 — a batch, not one sample, or another counting rule; the Markdown prints
the factors. Nothing is fitted to the paper's figures; they are printed as labelled "paper" rows.

`--backend_mode jax` runs under KERAS_BACKEND=jax (set it); `--bf16` is attention_block.py's GPU mode.
"""
import argparse
import datetime
import json
import os
import platform
import sys

from analysis.paper import TABLE9 as PAPER, TABLE9_HARDWARE
from base.plots import pyplot, save_figure
from base import fileio

NAME = "inference_speed"
SHAPES = "1x128,8x128,1x512,8x512"
MODES = {"graph": "tf-graph", "xla": "tf-xla", "eager": "tf-eager", "jax": "jax"}
LOAD_LIMIT = 1.0  # 1-minute load above which a timing ratio does not count (2 shared cores)
BLOCK_TITLES = {"self": "self-attention block", "mixed": "mixed-attention block"}


class UserError(Exception):
    """A bad flag or output path; printed as one `error: ...` line."""


def parse_shapes(text):
    """"1x128,8x512" -> [(1, 128), (8, 512)]."""
    shapes = []
    for item in text.split(","):
        batch, _, seq_len = item.strip().partition("x")
        if not (batch.isdigit() and seq_len.isdigit() and int(batch) > 0 and int(seq_len) > 0):
            raise UserError(f"--shapes: {item.strip()!r} is not BATCHxLENGTH (e.g. 8x512)")
        shapes.append((int(batch), int(seq_len)))
    return shapes


def block_gflops(hidden, heads, seq_len):
    """{block: {"with_output", "without_output"}} GFLOPs per sample of length seq_len."""
    from benchmarks.attention_block import block_configs
    from model.flops import attention_flops
    configs = dict(zip(("self", "mixed"), block_configs(hidden, heads)))
    def per_sample(cfg, include_output):
        return seq_len * sum(attention_flops(cfg, seq_len, include_output).values()) / 1e9
    return {block: {"with_output": per_sample(cfg, True), "without_output": per_sample(cfg, False)}
            for block, cfg in configs.items()}


def measure(hidden, heads, shapes, rounds, backend_mode, bf16=False):
    """Times both blocks (benchmarks/attention_block.py) and returns the result dict."""
    from benchmarks import attention_block
    load_before = os.getloadavg()
    print(f"load average (1, 5, 15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} "
          f"{load_before[2]:.2f}", flush=True)
    rows = attention_block.measure(MODES[backend_mode], shapes, ["auto"], rounds, bf16=bf16,
                                   hidden=hidden, heads=heads)
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min) after:  {load_after[0]:.2f} {load_after[1]:.2f} "
          f"{load_after[2]:.2f}", flush=True)
    lengths = sorted({s for _, s in shapes})
    return {
        "hidden": hidden, "heads": heads, "backend_mode": MODES[backend_mode],
        "precision": "bf16" if bf16 else "fp32", "rounds": rounds,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "date_utc": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}",
        "load_before": list(load_before), "load_after": list(load_after),
        "counts": load_before[0] <= LOAD_LIMIT,
        "shapes": [{"batch": r["batch"], "seq_len": r["seq_len"],
                    "self_ms_per_sample": r["self_ms"] / r["batch"],
                    "mixed_ms_per_sample": r["mixed_ms"] / r["batch"],
                    "time_ratio": r["ratio"], "flops_ratio": r["flops_ratio"]} for r in rows],
        "gflops_per_sample": {str(s): block_gflops(hidden, heads, s) for s in lengths},
        "paper": PAPER,
    }


def _shape_name(row):
    return f"{row['batch']}×{row['seq_len']}"


def markdown(result, command):
    """The paper's layout (rows: the two blocks; columns: GFLOPs/sample, ms/sample per shape),
    then the paper's rows beside ours at our longest length."""
    shapes, gflops = result["shapes"], result["gflops_per_sample"]
    lengths = list(gflops)
    verdict = ("counts" if result["counts"] else
               f"**does not count**: 1-minute load {result['load_before'][0]:.2f} > {LOAD_LIMIT} "
               "before the run (other jobs shared the cores)")
    lines = [
        "# Inference speed: mixed-attention vs self-attention block (paper Table 9)", "",
        f"Command: `{command}`  ",
        f"Machine: {result['machine']}; {result['backend_mode']}, {result['precision']}, "
        f"H {result['hidden']}, {result['heads']} heads; {result['rounds']} interleaved rounds, "
        f"medians; {result['date_utc']} UTC  ",
        "Load average (1, 5, 15 min): before " + " ".join(f"{v:.2f}" for v in result["load_before"])
        + ", after " + " ".join(f"{v:.2f}" for v in result["load_after"])
        + f" (after includes this run). Time ratios: {verdict}.", "",
        "| block | " + " | ".join(f"GFLOPs/sample s={s}" for s in lengths) + " | "
        + " | ".join(f"ms/sample {_shape_name(r)}" for r in shapes) + " |",
        "|---|" + "---:|" * (len(lengths) + len(shapes)),
    ]
    for block in ("self", "mixed"):
        lines.append(f"| {BLOCK_TITLES[block]} (ours) | "
                     + " | ".join(f"{gflops[s][block]['with_output']:.4g}" for s in lengths) + " | "
                     + " | ".join(f"{r[block + '_ms_per_sample']:.3f}" for r in shapes) + " |")
    flag = "" if result["counts"] else " (does not count)"
    lines.append("| mixed / self (ours) | "
                 + " | ".join(f"{gflops[s]['mixed']['with_output'] / gflops[s]['self']['with_output']:.3f}"
                              for s in lengths) + " | "
                 + " | ".join(f"{r['time_ratio']:.3f}{flag}" for r in shapes) + " |")
    longest = lengths[-1]
    at_longest = [r for r in shapes if str(r["seq_len"]) == longest]
    ours = gflops[longest]

    def ms(block):
        return "; ".join(f"{_shape_name(r)}: {r[block + '_ms_per_sample']:.3f}" for r in at_longest)
    paper_ratio = {k: PAPER["mixed"][k] / PAPER["self"][k] for k in PAPER["self"]}
    lines += [
        "", f"The paper's rows (base, {TABLE9_HARDWARE}; length and batch not stated) beside ours "
        f"at s={longest}:", "",
        "| row | GFLOPs/sample | GFLOPs/sample without output dense | ms/sample |",
        "|---|---:|---:|---|",
    ]
    for block in ("self", "mixed"):
        lines.append(f"| {BLOCK_TITLES[block]} (paper) | {PAPER[block]['gflops_per_sample']} | – | "
                     f"{PAPER[block]['ms_per_sample']} |")
        lines.append(f"| {BLOCK_TITLES[block]} (ours) | {ours[block]['with_output']:.4g} | "
                     f"{ours[block]['without_output']:.4g} | {ms(block)} |")
    our_time_ratio = "; ".join(f"{_shape_name(r)}: {r['time_ratio']:.3f}" for r in at_longest)
    lines += [
        f"| mixed / self (paper) | {paper_ratio['gflops_per_sample']:.3f} | – | "
        f"{paper_ratio['ms_per_sample']:.3f} |",
        f"| mixed / self (ours) | {ours['mixed']['with_output'] / ours['self']['with_output']:.3f} | "
        f"{ours['mixed']['without_output'] / ours['self']['without_output']:.3f} | {our_time_ratio} |",
        "",
        "FLOPs: model/flops.py `attention_flops` per token × length (2 per multiply-add, ELECTRA's "
        "convention): Q/K/V projections, scores, softmax, weighted sum, the convolution branch, and "
        "(first column) the output dense + residual + LayerNorm, which the timed block runs. "
        + _paper_note(ours, longest, result) + " Milliseconds depend on the hardware; compare the "
        "ratios.",
    ]
    return "\n".join(lines) + "\n"


def _paper_note(ours, longest, result):
    """How the paper's GFLOPs compare with our count at our longest length (computed, not fitted)."""
    if (result["hidden"], result["heads"]) != (768, 12):
        return (f"Ours is H {result['hidden']} with {result['heads']} heads, not the paper's base "
                "block: only the layout compares.")
    factors = {block: {key: PAPER[block]["gflops_per_sample"] / ours[block][key]
                       for key in ("with_output", "without_output")} for block in ("self", "mixed")}
    paper_ratio = PAPER["mixed"]["gflops_per_sample"] / PAPER["self"]["gflops_per_sample"]
    ratios = {key: ours["mixed"][key] / ours["self"][key] for key in ("with_output", "without_output")}
    nearest = min(ratios, key=lambda key: abs(ratios[key] - paper_ratio))
    return (f"The paper's GFLOPs are {factors['self']['with_output']:.1f}× (self) and "
            f"{factors['mixed']['with_output']:.1f}× (mixed) ours at s={longest} with the output "
            f"dense, {factors['self']['without_output']:.1f}× and "
            f"{factors['mixed']['without_output']:.1f}× without it: the paper's unit is not one "
            "sample of this length under this count (a batch, or another rule; it does not say). "
            f"Its mixed/self ratio ({paper_ratio:.3f}) is the comparable number; ours is nearest "
            f"{'with' if nearest == 'with_output' else 'without'} the output dense "
            f"({ratios[nearest]:.3f}).")


def plot(result, path):
    """Bar chart: ms/sample per shape, self vs mixed side by side."""
    plt = pyplot()
    shapes = result["shapes"]
    fig, ax = plt.subplots(figsize=(1.6 * len(shapes) + 3, 4))
    xs = range(len(shapes))
    width = 0.38
    for offset, block, color in ((-width / 2, "self", "tab:orange"), (width / 2, "mixed", "tab:blue")):
        values = [r[block + "_ms_per_sample"] for r in shapes]
        bars = ax.bar([x + offset for x in xs], values, width, label=BLOCK_TITLES[block], color=color)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.set_xticks(list(xs), [f"batch {r['batch']} × length {r['seq_len']}" for r in shapes],
                  fontsize=8)
    ax.set_xlabel("input shape (batch × sequence length)")
    ax.set_ylabel("time per sample (ms)")
    note = "" if result["counts"] else " — load > 1.0: does not count"
    ax.set_title(f"Attention block inference, H {result['hidden']}, {result['backend_mode']} "
                 f"{result['precision']}{note}")
    ax.legend()
    save_figure(fig, path)


def main(argv=None):
    from base.command import quiet_tensorflow
    quiet_tensorflow()   # first: no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--shapes", default=SHAPES, help="comma list of BATCHxLENGTH")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", default="base", help="small | medium-small | base (H and heads)")
    ap.add_argument("--hidden", type=int, help="override the size's hidden width (tiny tests)")
    ap.add_argument("--heads", type=int, help="override the size's head count")
    ap.add_argument("--backend_mode", default="graph", choices=sorted(MODES))
    ap.add_argument("--bf16", action="store_true", help="bf16 compute (GPU mode)")
    args = ap.parse_args(argv)
    try:
        shapes = parse_shapes(args.shapes)
        if args.rounds < 1:
            raise UserError(f"--rounds must be at least 1, got {args.rounds}")
        from model.config import ConfigError, ConvBertConfig
        try:
            size = ConvBertConfig.from_size(args.size)
            hidden, heads = args.hidden or size.hidden_size, args.heads or size.num_attention_heads
            ConvBertConfig(hidden_size=hidden, num_attention_heads=heads)
        except ConfigError as e:
            raise UserError(" ".join(str(e).split())) from None
        if fileio.exists(args.output_dir) and not fileio.isdir(args.output_dir):
            raise UserError(f"--output_dir {args.output_dir} is a file, not a directory")
        import keras
        backend = keras.backend.backend()
        if (args.backend_mode == "jax") != (backend == "jax"):
            raise UserError(f"--backend_mode {args.backend_mode} does not run on the {backend} "
                            "Keras backend (jax needs KERAS_BACKEND=jax, the others tensorflow)")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    args_text = " ".join(argv if argv is not None else sys.argv[1:])
    command = f"python -m analysis.inference_speed {args_text}"
    result = measure(hidden, heads, shapes, args.rounds, args.backend_mode, args.bf16)
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
