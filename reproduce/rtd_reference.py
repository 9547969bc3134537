"""An independent PyTorch reference for our replaced-token-detection (RTD) pre-training.

Question answered: does our Keras ELECTRA objective (pretrain/electra_pretrainer.py) learn like
ELECTRA's recipe implemented elsewhere, on the same examples? The reference is Hugging Face
transformers' `ElectraForMaskedLM` (generator) + `ElectraForPreTraining` (discriminator), trained
with ELECTRA's recipe written here in PyTorch, with every setting taken from OUR run's
<model_dir>/hparams.json, on exactly the batches our trainer reads. Both runs are scored by
pretrain/heldout_eval.py on one fixed held-out batch with one fixed masking and the same Gumbel
noise, so the curves are comparable step for step.

    # 1. the reference, trained on our run's shards, evaluated every 100 steps
    python reproduce/rtd_reference.py reference --model_dir=runs/electra_arch \\
        --train_tfrecords='shards/train/*' --heldout='shards/heldout/*' --output=ref.jsonl
    # 2. our run's checkpoints on the same held-out batch
    python reproduce/rtd_reference.py ours --model_dir=runs/electra_arch \\
        --heldout='shards/heldout/*' --output=ours.jsonl
    # 3. plot + table
    python reproduce/rtd_reference.py compare --reference=ref.jsonl --ours=ours.jsonl \\
        [--extra=convbert.jsonl --extra_label="ours (ConvBERT)"] --png=rtd.png --markdown=rtd.md

The comparison is meant for an ELECTRA-architecture run of ours (`model_hparam_overrides`
{"conv_type": "none", "head_ratio": 1}); for a ConvBERT run the reference is still plain ELECTRA
attention (a warning says so).

The reference recipe (google-research/electra run_pretraining.py, pretrain_helpers.py and the
optimization.py of its model package):
* generator and discriminator share one embeddings module (word, position, token type, LayerNorm;
  the generator keeps its own `embeddings_project`); the generator's output layer is the word
  embedding table (+ its own bias); weights start truncated-normal(initializer_range);
* masking: `heldout_eval.electra_mask` with rng np.random.default_rng([seed, step]);
* loss_gen = sum w*CE / (sum w + 1e-6) at the masked slots; Gumbel-max sample at the run's
  temperature (no gradient) written at the chosen positions; labels = sampled != original there;
  loss_disc = sum input_mask*BCE / (sum input_mask + 1e-6); total = gen_weight*loss_gen +
  disc_weight*loss_disc;
* AdamWeightDecay: beta 0.9/0.999, eps 1e-6, NO bias correction (unless --bias_correction),
  decoupled weight decay except LayerNorm and bias parameters, gradients clipped to global norm
  clip_norm (as tf.clip_by_global_norm), lr = peak*(1-step/total)^power*min(1, step/warmup) with
  step = updates already applied; dropout on while training; fp32 whatever the run's precision.

Deliberate differences from our implementation (it is a reference, not a copy): masking and
sampling draw from NumPy / torch generators, not from our counter-based hash; where several slots
chose one position the fake token is one of their samples (ELECTRA's scatter_update writes the
floor of their mean id, which ours reproduces).
"""
import argparse
import json
import math
import os
import re
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from training.progress import format_duration  # noqa: E402

NO_DECAY = ("LayerNorm", "layer_norm", "bias")  # ELECTRA's exclude_from_weight_decay
HELDOUT_SEED = 1234


def _print(message):
    print(message, flush=True)


class UsageError(ValueError):
    """Bad command-line input; printed as one `error: ...` line."""


def _input_errors():
    """Error types meaning bad input, from the modules loaded (compare loads no TensorFlow)."""
    types = [UsageError, OSError]
    for module, name in (("pretrain.heldout_eval", "EvalError"), ("data.errors", "DataError"),
                         ("pretrain.hparams", "HParamsError"), ("model.config", "ConfigError")):
        if module in sys.modules:
            types.append(getattr(sys.modules[module], name))
    return tuple(types)


# ------------------------------------------------------------------------------ models
def electra_config(config, pad_token_id=None):
    """Our ConvBertConfig -> transformers.ElectraConfig with the same widths and dropouts."""
    from transformers import ElectraConfig
    return ElectraConfig(
        vocab_size=config.vocab_size, embedding_size=config.embedding_size,
        hidden_size=config.hidden_size, num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
        hidden_dropout_prob=config.hidden_dropout_prob,
        attention_probs_dropout_prob=config.attention_probs_dropout_prob,
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size, layer_norm_eps=config.layer_norm_eps,
        initializer_range=config.initializer_range,
        pad_token_id=pad_token_id)  # ELECTRA's embedding has no padding row


def model_configs(hp):
    """(discriminator, generator) ConvBertConfig of our run, as our trainer builds them."""
    from pretrain.generator_config import generator_config
    from pretrain.hparams import model_config
    disc = model_config(hp, hp.vocab_size)
    return disc, generator_config(disc, hp.generator_hidden_size, hp.generator_layers)


def architecture_warnings(disc):
    """Lines saying where our run is not the ELECTRA architecture the reference has."""
    notes = []
    if disc.conv_type != "none" or disc.head_ratio != 1:
        notes.append(f"the run is a ConvBERT one (conv_type {disc.conv_type!r}, head_ratio "
                     f"{disc.head_ratio}); the reference is plain ELECTRA attention, so this "
                     "compares architectures, not implementations of one (use "
                     'model_hparam_overrides {"conv_type": "none", "head_ratio": 1})')
    if disc.num_groups != 1:
        notes.append(f"the run uses grouped linear layers (num_groups {disc.num_groups}); the "
                     "reference's are dense")
    return notes


def _init_like_electra(model, std):
    """ELECTRA's initialiser: truncated normal (2 std) weights, zero biases."""
    import torch
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)


def build_models(hp):
    """(generator ElectraForMaskedLM, discriminator ElectraForPreTraining), embeddings shared."""
    import torch
    from transformers import ElectraForMaskedLM, ElectraForPreTraining
    disc_cfg, gen_cfg = model_configs(hp)
    torch.manual_seed(hp.seed)
    discriminator = ElectraForPreTraining(electra_config(disc_cfg))
    generator = ElectraForMaskedLM(electra_config(gen_cfg))
    _init_like_electra(discriminator, disc_cfg.initializer_range)
    _init_like_electra(generator, gen_cfg.initializer_range)
    # One embeddings module (word, position, token type, LayerNorm); the output layer is its table.
    generator.electra.embeddings = discriminator.electra.embeddings
    generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    return generator, discriminator


def named_parameters(generator, discriminator):
    """[(name, parameter)] of both models, each shared tensor once."""
    seen, out = set(), []
    for prefix, model in (("discriminator", discriminator), ("generator", generator)):
        for name, param in model.named_parameters():
            if id(param) not in seen:
                seen.add(id(param))
                out.append((f"{prefix}.{name}", param))
    return out


def generator_logits(generator, masked_ids, input_mask, segment_ids, positions):
    """Generator logits [B, N, V] at the masked positions (gathered first, as ELECTRA)."""
    import torch
    hidden = generator.electra(input_ids=masked_ids, attention_mask=input_mask,
                               token_type_ids=segment_ids).last_hidden_state
    index = positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
    gathered = torch.gather(hidden, 1, index)
    return generator.generator_lm_head(generator.generator_predictions(gathered))


def torch_fns(generator, discriminator):
    """(gen_logits_fn, disc_logits_fn) for heldout_eval.evaluate (call in eval mode)."""
    import torch

    def t(x):
        return torch.from_numpy(np.asarray(x, np.int64))

    @torch.no_grad()
    def gen_fn(masked_ids, mask, segments, positions):
        return generator_logits(generator, t(masked_ids), t(mask), t(segments),
                                t(positions)).float().numpy()

    @torch.no_grad()
    def disc_fn(fake_ids, mask, segments):
        return discriminator(input_ids=t(fake_ids), attention_mask=t(mask),
                             token_type_ids=t(segments)).logits.float().numpy()

    return gen_fn, disc_fn


# ------------------------------------------------------------------------------ optimizer
def learning_rate(step, peak, warmup, total, power=1.0):
    """ELECTRA's schedule; `step` = updates already applied (the first update uses step 0)."""
    lr = peak * (1.0 - min(step, total) / total) ** power
    return lr * min(1.0, step / warmup) if warmup > 0 else lr


def clip_by_global_norm(params, clip_norm):
    """tf.clip_by_global_norm on the .grad of `params`; returns the norm before clipping."""
    import torch
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.sqrt(sum(torch.sum(g.double() ** 2) for g in grads)).item()
    if clip_norm and norm > 0:
        scale = clip_norm / max(norm, clip_norm)
        for g in grads:
            g.mul_(scale)
    return norm


def adam_weight_decay(groups, bias_correction=False):
    """ELECTRA's AdamWeightDecay as a torch optimizer over param groups {"params", "weight_decay"}:

        m <- b1 m + (1 - b1) g ;  v <- b2 v + (1 - b2) g^2       (no bias correction)
        param <- param - lr * (m / (sqrt(v) + eps) + weight_decay * param)

    lr is set per step in each group's "lr"; the gradients are clipped before `step()`.
    """
    import torch

    class AdamWeightDecay(torch.optim.Optimizer):
        def __init__(self, groups):
            super().__init__(groups, dict(lr=0.0, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0))

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                    state["t"] += 1
                    m, v = state["m"], state["v"]
                    m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                    v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                    if bias_correction:
                        update = (m / (1 - beta1 ** state["t"])) / (
                            (v / (1 - beta2 ** state["t"])).sqrt() + group["eps"])
                    else:
                        update = m / (v.sqrt() + group["eps"])
                    if group["weight_decay"]:
                        update = update + group["weight_decay"] * p
                    p.add_(update, alpha=-group["lr"])

    return AdamWeightDecay(groups)


def make_optimizer(generator, discriminator, weight_decay_rate, bias_correction=False):
    """AdamWeightDecay over both models (shared tensors once); no decay for LayerNorm / bias."""
    decay, no_decay = [], []
    for name, param in named_parameters(generator, discriminator):
        (no_decay if any(re.search(p, name) for p in NO_DECAY) else decay).append(param)
    return adam_weight_decay([{"params": decay, "weight_decay": weight_decay_rate},
                              {"params": no_decay, "weight_decay": 0.0}], bias_correction)


# ------------------------------------------------------------------------------ data
def training_batches(hp, files):
    """The batches our trainer reads (pretrain.task.PretrainingTask.dataset), as NumPy dicts.

    PretrainingTask.build() calls keras.utils.set_random_seed(hp.seed) before the dataset is made, and the
    shuffles' seeds combine with TF's global seed, so the same global seed is set here.
    """
    import tensorflow as tf
    from data.pretraining_input import pretraining_dataset
    tf.random.set_seed(hp.seed)
    ds = pretraining_dataset(files, hp.train_batch_size, hp.max_seq_length, is_training=True,
                             seed=hp.seed, shuffle_buffer=hp.shuffle_buffer, check_files=False)
    for batch in ds:
        yield {k: v.numpy() for k, v in batch.items()}


# ------------------------------------------------------------------------------ training
def train_step(generator, discriminator, optimizer, batch, step, hp, ids, noise):
    """One ELECTRA RTD update; returns {"loss", "gen_loss", "disc_loss", "grad_norm", "lr"}."""
    from pretrain import heldout_eval
    import torch
    import torch.nn.functional as F
    masked = heldout_eval.electra_mask(batch["input_ids"], batch["input_mask"],
                                       np.random.default_rng([hp.seed, step]), hp.mask_prob,
                                       hp.max_predictions_per_seq, **ids)

    def t(x):
        return torch.from_numpy(np.asarray(x, np.int64))

    input_mask, segments = t(batch["input_mask"]), t(batch["segment_ids"])
    positions, lm_ids = t(masked["masked_lm_positions"]), t(masked["masked_lm_ids"])
    weights = torch.from_numpy(masked["masked_lm_weights"])

    logits = generator_logits(generator, t(masked["masked_input_ids"]), input_mask, segments,
                              positions)                                          # [B, N, V]
    ce = F.cross_entropy(logits.flatten(0, 1), lm_ids.flatten(), reduction="none")
    gen_loss = (weights.flatten() * ce).sum() / (weights.sum() + 1e-6)

    with torch.no_grad():  # Gumbel-max sample from softmax(logits / T)
        scaled = logits.float() / hp.temperature
        if hp.disallow_correct:
            scaled = scaled - 1000.0 * F.one_hot(lm_ids, scaled.shape[-1]).float()
        u = torch.rand(scaled.shape, generator=noise)
        sampled = torch.argmax(scaled - torch.log(-torch.log(u + 1e-9) + 1e-9), dim=-1)
    fake, written = heldout_eval.write_samples(batch["input_ids"], sampled.numpy(),
                                               masked["masked_lm_positions"],
                                               masked["masked_lm_weights"])
    labels = torch.from_numpy((written & (fake != batch["input_ids"])).astype(np.float32))

    disc_logits = discriminator(input_ids=t(fake), attention_mask=input_mask,
                                token_type_ids=segments).logits
    maskf = input_mask.float()
    bce = F.binary_cross_entropy_with_logits(disc_logits, labels, reduction="none")
    disc_loss = (maskf * bce).sum() / (maskf.sum() + 1e-6)
    loss = hp.gen_weight * gen_loss + hp.disc_weight * disc_loss

    lr = learning_rate(step, hp.learning_rate, hp.num_warmup_steps, hp.num_train_steps,
                       hp.lr_decay_power)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grad_norm = clip_by_global_norm(params, hp.clip_norm)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return {"loss": loss.item(), "gen_loss": gen_loss.item(), "disc_loss": disc_loss.item(),
            "grad_norm": grad_norm, "lr": lr}


def _write_line(f, record):
    f.write(json.dumps(record) + "\n")  # one write per line, flushed: no half lines
    f.flush()


def run_reference(args, log=_print):
    import torch
    from pretrain import heldout_eval
    from data.tfrecord_io import find_shards
    hp, values = heldout_eval.load_hparams(args.model_dir)
    if not hp.electra_objective:
        raise UsageError(f"{args.model_dir} is a plain MLM run (electra_objective false)")
    disc_cfg, _ = model_configs(hp)
    for note in architecture_warnings(disc_cfg):
        print(f"warning: {note}", file=sys.stderr)
    ids = heldout_eval.special_ids(args.vocab_file, values)
    train_files = find_shards(args.train_tfrecords)
    if set(heldout_eval.find_files(args.heldout)) & set(train_files):
        print("warning: the held-out shards are among the training shards", file=sys.stderr)
    batch = heldout_eval.heldout_batch(
        args.heldout, args.heldout_examples, hp.max_seq_length, HELDOUT_SEED, hp.mask_prob,
        hp.max_predictions_per_seq, **ids)
    # Training stops after --num_train_steps; the schedule stays the run's, so step k of the
    # reference is comparable with step k of ours even in a shortened reference.
    steps = args.num_train_steps or hp.num_train_steps

    torch.set_num_threads(args.threads)
    generator, discriminator = build_models(hp)
    optimizer = make_optimizer(generator, discriminator, hp.weight_decay_rate, args.bias_correction)
    noise = torch.Generator().manual_seed(hp.seed)
    num_params = sum(p.numel() for _, p in named_parameters(generator, discriminator))
    log(f"reference: HF ELECTRA, discriminator H{disc_cfg.hidden_size} "
        f"L{disc_cfg.num_hidden_layers}, {num_params:,} parameters (with the generator); batch "
        f"{hp.train_batch_size} x {hp.max_seq_length}; lr {hp.learning_rate:g}, warm-up "
        f"{hp.num_warmup_steps}, schedule {hp.num_train_steps} steps; training {steps} steps on "
        f"{len(train_files)} shard(s); bias correction {bool(args.bias_correction)}")

    start = time.time()
    import tensorflow as tf  # the output may be a bucket path
    with tf.io.gfile.GFile(args.output, "w") as out:
        generator.train()
        discriminator.train()
        batches = training_batches(hp, train_files)
        for step in range(steps):
            stats = train_step(generator, discriminator, optimizer, next(batches), step, hp, ids,
                               noise)
            if not math.isfinite(stats["loss"]):
                raise UsageError(f"non-finite reference loss at step {step + 1}")
            done = step + 1
            if done % args.eval_every and done != steps:
                continue
            generator.eval()
            discriminator.eval()
            metrics = heldout_eval.evaluate(batch, *torch_fns(generator, discriminator),
                                            temperature=hp.temperature)
            generator.train()
            discriminator.train()
            wall = time.time() - start
            _write_line(out, {"step": done, **metrics, "train_loss": stats["loss"],
                              "wall_seconds": round(wall, 2)})
            log(f"step {done}/{steps} | held-out gen acc {metrics['gen_accuracy']:.3f} loss "
                f"{metrics['gen_loss']:.3f} | disc AUC {metrics['disc_auc']:.3f} acc "
                f"{metrics['disc_accuracy']:.3f} | train loss {stats['loss']:.3f} | lr "
                f"{stats['lr']:.3g} | {wall:.0f}s | ETA {format_duration(wall / done * (steps - done))}")
    return args.output


def run_ours(args, log=_print):
    from pretrain import heldout_eval
    hp, values = heldout_eval.load_hparams(args.model_dir)
    heldout_eval.checkpoint_paths(args.model_dir)  # fail early when there is none
    ids = heldout_eval.special_ids(args.vocab_file, values)
    batch = heldout_eval.heldout_batch(
        args.heldout, args.heldout_examples, hp.max_seq_length, HELDOUT_SEED, hp.mask_prob,
        hp.max_predictions_per_seq, **ids)
    results = heldout_eval.evaluate_checkpoints(args.model_dir, batch, every=args.every,
                                                vocab_file=args.vocab_file, log=log)
    _write_atomically(args.output, "".join(json.dumps(r) + "\n" for r in results).encode())
    return args.output


def _write_atomically(path, data):
    """bytes -> path (local or bucket) via a temporary name, so no reader sees half a file."""
    import tensorflow as tf
    with tf.io.gfile.GFile(path + ".tmp", "wb") as f:
        f.write(data)
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


# ------------------------------------------------------------------------------ compare
def read_jsonl(path):
    import tensorflow as tf
    if not tf.io.gfile.exists(path):
        raise UsageError(f"{path} does not exist")
    with tf.io.gfile.GFile(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if not records:
        raise UsageError(f"{path} holds no evaluation")
    return sorted(records, key=lambda r: r["step"])


def plot(runs, png):
    """runs: [(label, records)] -> two panels (generator accuracy, discriminator AUC) vs step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = (("gen_accuracy", "accuracy (masked positions)", "generator accuracy"),
              ("disc_auc", "ROC AUC (non-padding tokens)", "discriminator AUC"))
    for ax, (key, ylabel, title) in zip(axes, panels):
        for label, records in runs:
            ax.plot([r["step"] for r in records], [r[key] for r in records], marker="o",
                    markersize=3, label=label)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Replaced-token detection on a fixed held-out batch (fixed masking and noise)")
    fig.tight_layout()
    import io
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    _write_atomically(png, buffer.getvalue())


def markdown_table(reference, ours, ours_label="ours", tolerance=0.05, from_step=200):
    """Reference vs ours at the steps both evaluated, and whether every |delta| <= tolerance."""
    ref = {r["step"]: r for r in reference}
    common = [r for r in ours if r["step"] in ref]
    lines = [f"| step | reference gen acc | {ours_label} gen acc | Δ | reference AUC | "
             f"{ours_label} AUC | Δ |", "|---|---|---|---|---|---|---|"]
    worst, judged = 0.0, 0
    for r in common:
        a, b = ref[r["step"]], r
        d_acc = b["gen_accuracy"] - a["gen_accuracy"]
        d_auc = b["disc_auc"] - a["disc_auc"]
        lines.append(f"| {r['step']} | {a['gen_accuracy']:.3f} | {b['gen_accuracy']:.3f} | "
                     f"{d_acc:+.3f} | {a['disc_auc']:.3f} | {b['disc_auc']:.3f} | {d_auc:+.3f} |")
        if r["step"] >= from_step:
            judged += 1
            worst = max(worst, abs(d_acc) if math.isfinite(d_acc) else math.inf,
                        abs(d_auc) if math.isfinite(d_auc) else math.inf)
    lines.append("")
    if not common:
        lines.append("No step was evaluated in both runs.")
    elif not judged:
        lines.append(f"No common step >= {from_step}: nothing to judge against the "
                     f"{tolerance} tolerance.")
    else:
        verdict = "yes" if worst <= tolerance else "no"
        lines.append(f"Every |Δ| from step {from_step} on is ≤ {tolerance}: **{verdict}** "
                     f"(largest {worst:.3f} over {judged} step(s)).")
    return "\n".join(lines) + "\n"


def run_compare(args, log=_print):
    reference = read_jsonl(args.reference)
    ours = read_jsonl(args.ours)
    runs = [("reference (HF ELECTRA, PyTorch)", reference), (args.ours_label, ours)]
    if args.extra:
        runs.append((args.extra_label, read_jsonl(args.extra)))
    plot(runs, args.png)
    text = ("# RTD: reference vs ours on a fixed held-out batch\n\n"
            f"Δ = {args.ours_label} − reference.\n\n"
            + markdown_table(reference, ours, args.ours_label))
    _write_atomically(args.markdown, text.encode("utf-8"))
    log(text)
    return args.png, args.markdown


# ------------------------------------------------------------------------------ CLI
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--model_dir", required=True, help="our pre-training run (hparams.json)")
        p.add_argument("--heldout", required=True, help="glob(s) of held-out TFRecord shards")
        p.add_argument("--output", required=True, help="JSONL, one line per evaluation")
        p.add_argument("--heldout_examples", type=int, default=256)
        p.add_argument("--vocab_file", default=None,
                       help="for the [CLS]/[SEP]/[MASK] ids (default: BERT's 101/102/103)")

    p = sub.add_parser("reference", help="train the PyTorch reference, evaluate it as it goes")
    common(p)
    p.add_argument("--train_tfrecords", required=True,
                   help="glob(s) of the shards our run trained on")
    p.add_argument("--eval_every", type=int, default=100)
    p.add_argument("--num_train_steps", type=int, default=None,
                   help="stop after this many steps (default: the run's; the LR schedule stays "
                        "the run's)")
    p.add_argument("--bias_correction", action="store_true",
                   help="Adam bias correction (ELECTRA has none)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")

    p = sub.add_parser("ours", help="evaluate our run's checkpoints")
    common(p)
    p.add_argument("--every", type=int, default=None, help="only checkpoints at multiples of this")

    p = sub.add_parser("compare", help="plot and tabulate reference vs ours")
    p.add_argument("--reference", required=True)
    p.add_argument("--ours", required=True)
    p.add_argument("--ours_label", default="ours (ELECTRA arch)")
    p.add_argument("--extra", default=None, help="a third JSONL (e.g. our ConvBERT run)")
    p.add_argument("--extra_label", default="ours (ConvBERT)")
    p.add_argument("--png", required=True)
    p.add_argument("--markdown", required=True)
    args = ap.parse_args(argv)
    for name in ("eval_every", "num_train_steps", "heldout_examples", "every", "threads"):
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            ap.error(f"--{name} must be positive")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            {"reference": run_reference, "ours": run_ours, "compare": run_compare}[args.command](
                args)
    except Exception as e:  # the toolkit's input errors are one line; anything else is a bug
        if not isinstance(e, _input_errors()):
            raise
        text = str(e).strip()
        print(f"error: {text.splitlines()[0] if text else type(e).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
