"""Elastic pre-training: ELECTRA / ConvBERT pre-training whose discriminator also trains its
DynaBERT-style sub-networks, so every (width, depth) cell is a usable pre-trained
encoder without a fine-tuned teacher.

    python -m elastic.pretrain --pretrain_tfrecords='shards/*' --vocab_file=vocab.txt \
        --model_dir=runs/elastic --elastic_widths=1,0.75,0.5,0.25 --elastic_depths=1,0.75,0.5 \
        --num_sampled=2 --extract_cells          # + every flag of run_pretraining.py

One step (`ElasticPretrainingTask.compute`), on one batch:

* the plain ELECTRA step of pretrain/task.py, unchanged (the same `PretrainingTask.forward`:
  masking, generator MLM, Gumbel sampling, full discriminator): gen_weight x MLM + disc_weight x
  RTD of the full discriminator;
* plus, on the SAME corrupted inputs and labels, disc_weight x the RTD loss of sub-networks of the
  discriminator: `elastic.slicing.sliced_forward(discriminator encoder, fake ids, subnet)` through
  the discriminator's own prediction head, scored by `ElectraPretrainer.rtd_loss` (the one home of
  the RTD loss; global denominators as the full one, so replicas still sum to one device).
  The sub-networks follow the sandwich rule of once-for-all / BigNAS: the largest cell is the
  full model above, then always the smallest cell (smallest width, smallest depth), then
  `num_sampled` cells drawn without replacement from the rest of the width x depth grid (DynaBERT's
  WIDTH_MULTS x DEPTH_MULTS by default, minus the full and the smallest cell).
  Everything is summed into one loss: one gradient, one clip, one optimizer step.

Sampling is a pure function of (seed, step): `sampling.example_keys(seed, step, 0)` in a stream of
its own (pretrain/sampling.py's counter-based hash, as masking), so an exact resume draws the same
cells and a batch split over replicas trains the same cells everywhere. Inside the compiled step
each sampled slot is a `tf.switch_case` over the pool's cells: every cell is traced (and, under
XLA, compiled) once, but a step runs only the branches it drew.

Cost per step, relative to plain pre-training: the discriminator's forward + backward is repeated
once per extra sub-network at that sub-network's size, i.e. 1 + (FLOPs(smallest) + num_sampled x
mean FLOPs(pool)) / FLOPs(generator + discriminator) in expectation; `expected_cost` computes it
(model/flops.py) and the command logs it. At max_seq_length 128 with DynaBERT's 4 x 3 grid:
the smallest cell w0.25_d0.5 alone is 41% (small) / 32-33% (medium-small, base) of the
discriminator's FLOPs (embeddings, the span convolution and the hidden-size-wide parts stay), so
a step costs 1.29x / 1.25x plain pre-training with num_sampled 0, 1.75x / 1.69x with 1, 2.20x /
2.13x / 2.11x (small / medium-small / base) with the default 2, and 5.8x / 5.6x with all 10 other
cells every step. The compiled step holds 1 + num_sampled x (pool size) sub-network graphs (each
slot's switch over the pool): tracing and XLA compilation take that much longer, once.

The (L, H) grid instead (the rebuttal's R1 experiment: one elastic 6-layer model, H = 128 / 256 /
512 / 768, L = 4 / 6): `--elastic_hidden_sizes=128,256,512,768 --elastic_layers=4,6` makes the
cells `Subnet.for_hidden(config, H, L)` (slicing.py: hidden size H of the residual stream, heads
and FFN scaled by H / hidden_size, L layers by DynaBERT's rule), named L<L>_H<H>; the smallest
cell is (smallest L, smallest H); the discriminator head of a cell is cut to its hidden size
(`sliced_discriminator_head`). It replaces the width x depth grid (the flags do not combine).

The sub-networks here are prefixes of the heads / FFN neurons in their stored order: training
itself makes the first units the shared ones (no importance rewiring, which needs a trained model;
OFA / BigNAS train prefixes from scratch the same way).

After training `--extract_cells` exports each cell's discriminator encoder with elastic/extract.py
into <model_dir>/cells/w<mw>_d<md>/ or cells/L<L>_H<H>/ (`ConvBertModel.from_pretrained` loads it;
its output equals `sliced_forward` of the trained model). The elastic settings are kept in
<model_dir>/elastic.json; a resume with other settings is refused (it would not be exact).
Bad input: one line `error: ...`, exit 1. TensorFlow backend only (the training core).
"""
import json
import os
import sys

if __name__ == "__main__":   # before TensorFlow / Keras start (as run_pretraining.py)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from base.command import quiet_tensorflow
    quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

import numpy as np  # noqa: E402

from elastic.slicing import (DEPTH_MULTS, WIDTH_MULTS, Subnet, check_elastic,  # noqa: E402
                             sliced_discriminator_head, sliced_forward)
from model.config import ConfigError  # noqa: E402
from pretrain.task import PretrainingTask  # noqa: E402

ELASTIC_FILE = "elastic.json"
CELLS_DIR = "cells"
# The sampling stream (pretrain/sampling.py's streams: digits of pi; this one follows them).
STREAM_ELASTIC = 0xA4093822


class ElasticError(ValueError):
    """Bad elastic settings; one line."""


def cell_name(width, depth):
    return f"w{width:g}_d{depth:g}"


def hidden_cell_name(layers, hidden):
    """The (L, H) cell's name, as the rebuttal writes it: L4_H256."""
    return f"L{layers}_H{hidden}"


def parse_sizes(text, what):
    """'128,256' -> (256, 128), largest first; distinct positive integers."""
    items = list(text) if isinstance(text, (tuple, list)) else \
        [x.strip() for x in str(text).split(",") if x.strip()]
    try:
        values = tuple(int(x) for x in items)
    except (TypeError, ValueError):
        raise ElasticError(f"--{what}: not a comma list of integers: {text!r}") from None
    if not values or any(v < 1 for v in values) or len(set(values)) != len(values) or \
            any(isinstance(x, float) and not float(x).is_integer() for x in items):
        raise ElasticError(f"--{what}: need distinct positive integers, got {text!r}")
    return tuple(sorted(values, reverse=True))


def parse_multipliers(text, what):
    """'1,0.75,0.5' -> (1.0, 0.75, 0.5), widest first; distinct values in (0, 1]."""
    if isinstance(text, (tuple, list)):
        values = tuple(float(x) for x in text)
    else:
        try:
            values = tuple(float(x) for x in str(text).split(",") if x.strip())
        except ValueError:
            raise ElasticError(f"--{what}: not a comma list of numbers: {text!r}") from None
    if not values or any(not 0 < v <= 1 for v in values) or len(set(values)) != len(values):
        raise ElasticError(f"--{what}: need distinct multipliers in (0, 1], got {text!r}")
    return tuple(sorted(values, reverse=True))


class ElasticPretrainingTask(PretrainingTask):
    """PretrainingTask + RTD losses of the discriminator's sub-networks (module docstring).

    widths / depths: the (width, depth) grid; or hidden_sizes (+ layers: layer counts, default
    all) for the (L, H) grid instead; num_sampled: random cells per step besides the smallest;
    include_smallest: False drops the smallest cell (with num_sampled 0 the task is then plain
    pre-training, step for step)."""

    def __init__(self, hp, train_files, vocab_size, special_ids=None, widths=WIDTH_MULTS,
                 depths=DEPTH_MULTS, num_sampled=2, include_smallest=True, hidden_sizes=None,
                 layers=None):
        super().__init__(hp, train_files, vocab_size, special_ids)
        if not hp.electra_objective:
            raise ElasticError("elastic pre-training trains the discriminator's sub-networks: "
                               "it needs electra_objective=true")
        config = self.disc_config
        check_elastic(config)
        self.include_smallest = bool(include_smallest)
        self.hidden_grid = bool(hidden_sizes)
        if self.hidden_grid:    # the (L, H) grid: cells (layers, hidden), largest first
            self.widths = self.depths = None
            self.hidden_sizes = parse_sizes(hidden_sizes, "elastic_hidden_sizes")
            self.layer_counts = (parse_sizes(layers, "elastic_layers") if layers
                                 else (config.num_hidden_layers,))
            self.cells = [(n, h) for h in self.hidden_sizes for n in self.layer_counts]
            try:
                self.subnets = {cell: Subnet.for_hidden(config, cell[1], num_layers=cell[0])
                                for cell in self.cells}
            except ConfigError as e:
                raise ElasticError(f"--elastic_hidden_sizes / --elastic_layers: {e}") from None
            self.smallest = (self.layer_counts[-1], self.hidden_sizes[-1])
            full = (config.num_hidden_layers, config.hidden_size)
        else:
            if layers:
                raise ElasticError("--elastic_layers gives the layer counts of the (L, H) grid: "
                                   "it needs --elastic_hidden_sizes")
            self.widths = parse_multipliers(widths, "elastic_widths")
            self.depths = parse_multipliers(depths, "elastic_depths")
            self.cells = [(w, d) for w in self.widths for d in self.depths]
            self.subnets = {cell: Subnet.for_width(config, *cell) for cell in self.cells}
            self.smallest = (self.widths[-1], self.depths[-1])
            full = (1.0, 1.0)
        from elastic.extract import subnetwork_config
        for cell, subnet in self.subnets.items():   # every cell can be extracted
            try:
                subnetwork_config(config, subnet)
            except ConfigError as e:
                raise ElasticError(f"cell {self.cell_name(cell)}: {e}") from None
        excluded = {full} | ({self.smallest} if self.include_smallest else set())
        self.pool = [cell for cell in self.cells if cell not in excluded]
        if self.include_smallest and self.smallest == full:
            raise ElasticError(
                "the elastic grid has only the full cell (" + (
                    "hidden sizes and layer counts of the full model): give smaller "
                    "--elastic_hidden_sizes / --elastic_layers" if self.hidden_grid else
                    "widths and depths 1): give smaller --elastic_widths / --elastic_depths"))
        self.num_sampled = int(num_sampled)
        if not 0 <= self.num_sampled <= len(self.pool):
            raise ElasticError(
                f"--num_sampled {num_sampled}: the grid {self.cell_name(self.cells[0])}"
                f" ... {self.cell_name(self.smallest)} has {len(self.pool)} cells besides the full "
                f"{'and the smallest ' if self.include_smallest else ''}one; give 0 to "
                f"{len(self.pool)}")

    def cell_name(self, cell):
        """w<mw>_d<md> for a (width, depth) cell, L<L>_H<H> for an (L, H) one."""
        return hidden_cell_name(*cell) if self.hidden_grid else cell_name(*cell)

    def grid_text(self):
        if self.hidden_grid:
            return (f"hidden sizes {','.join(map(str, self.hidden_sizes))} x layers "
                    f"{','.join(map(str, self.layer_counts))}")
        return (f"widths {','.join(f'{w:g}' for w in self.widths)} x depths "
                f"{','.join(f'{d:g}' for d in self.depths)}")

    def settings(self):
        """What an exact resume must keep (<model_dir>/elastic.json)."""
        if self.hidden_grid:
            grid = {"hidden_sizes": list(self.hidden_sizes), "layers": list(self.layer_counts)}
        else:
            grid = {"widths": list(self.widths), "depths": list(self.depths)}
        return {**grid, "num_sampled": self.num_sampled, "include_smallest": self.include_smallest}

    # ------------------------------------------------------------------ sampling
    def sample_indices(self, step):
        """Indices into `pool` of the cells drawn at `step` ([num_sampled] int32): the first
        num_sampled of a random permutation keyed by (seed, step) only."""
        from keras import ops
        from pretrain import sampling
        keys = sampling.example_keys(self.hp.seed, step, ops.zeros((1,), "int32"))
        uniforms = sampling.uniform(sampling.stream_keys(keys, STREAM_ELASTIC), len(self.pool))
        return ops.cast(ops.argsort(uniforms[0])[:self.num_sampled], "int32")

    def sampled_cells(self, step):
        """The cells drawn at `step` (eager; what `compute` trains then)."""
        if not self.num_sampled:
            return []
        from keras import ops
        return [self.pool[int(i)] for i in ops.convert_to_numpy(self.sample_indices(step))]

    # ------------------------------------------------------------------ one batch
    def cell_rtd(self, subnet, inputs, labels, input_mask, denominator):
        """(loss, loss_sum, accuracy) of RTD for one sub-network of the discriminator."""
        pretrainer = self.pretrainer
        hidden = sliced_forward(pretrainer.discriminator, inputs, subnet, training=True)
        logits = sliced_discriminator_head(pretrainer.disc_head, hidden, subnet, self.disc_config)
        out = pretrainer.rtd_loss(logits, labels, input_mask, denominator)
        return out["disc_loss"], out["disc_loss_sum"], out["disc_accuracy"]

    def compute(self, batch, step, denominators):
        import tensorflow as tf
        out = self.forward(batch, step, denominators)        # the plain ELECTRA step
        loss, metrics = out["total_loss"], self.window_metrics(batch, out)
        metrics["electra_loss"] = tf.cast(loss, tf.float32)
        segment_ids = batch.get("segment_ids")
        inputs = {"input_ids": out["fake_input_ids"], "input_mask": out["input_mask"],
                  "segment_ids": (tf.zeros_like(out["fake_input_ids"]) if segment_ids is None
                                  else tf.cast(segment_ids, tf.int32))}
        labels, mask = out["disc_labels"], out["input_mask"]
        denominator = None if denominators is None else denominators["disc"]
        weight = self.pretrainer.disc_weight
        w_disc = tf.cast(out["disc_weight_sum"], tf.float32)

        def rtd(cell):
            return self.cell_rtd(self.subnets[cell], inputs, labels, mask, denominator)

        if self.include_smallest:
            cell_loss, loss_sum, accuracy = rtd(self.smallest)
            loss = loss + weight * cell_loss
            metrics["small_disc_loss"] = loss_sum
            metrics["small_disc_accuracy"] = accuracy * w_disc
        if self.num_sampled:
            picks = self.sample_indices(step)
            branches = [lambda cell=cell: rtd(cell) for cell in self.pool]
            sums = [0.0, 0.0]
            for slot in range(self.num_sampled):
                if len(branches) == 1:
                    cell_loss, loss_sum, accuracy = branches[0]()
                else:
                    cell_loss, loss_sum, accuracy = tf.switch_case(picks[slot], branches)
                loss = loss + weight * cell_loss
                sums = [sums[0] + loss_sum, sums[1] + accuracy * w_disc]
            metrics["sampled_disc_loss"], metrics["sampled_disc_accuracy"] = sums
        return loss, metrics

    # ------------------------------------------------------------------ a log window
    def summarize(self, sums, num_steps):
        record = super().summarize(sums, num_steps)
        record["electra_loss"] = record["loss"]
        weight = max(float(sums["disc_weight"]), 1e-6)
        extra = 0.0
        if self.include_smallest:
            record["small_disc_loss"] = float(sums["small_disc_loss"]) / weight
            record["small_disc_accuracy"] = float(sums["small_disc_accuracy"]) / weight
            extra += record["small_disc_loss"]
        if self.num_sampled:
            k = self.num_sampled
            record["sampled_disc_loss"] = float(sums["sampled_disc_loss"]) / (weight * k)
            record["sampled_disc_accuracy"] = float(sums["sampled_disc_accuracy"]) / (weight * k)
            extra += k * record["sampled_disc_loss"]
        record["loss"] = record["electra_loss"] + self.hp.disc_weight * extra
        return record

    def describe(self, record):
        text = super().describe(record) + f" | electra loss {record['electra_loss']:.4f}"
        if self.include_smallest:
            text += (f" | {self.cell_name(self.smallest)} disc loss {record['small_disc_loss']:.4f} "
                     f"acc {record['small_disc_accuracy']:.3f}")
        if self.num_sampled:
            text += (f" | {self.num_sampled} sampled disc loss "
                     f"{record['sampled_disc_loss']:.4f}")
        return text

    # ------------------------------------------------------------------ cost, cells
    def expected_cost(self, seq_len=None):
        """Forward FLOPs per token of one step relative to plain pre-training (expectation over
        the sampled cells; backward scales alike), and each cell's share of the discriminator."""
        from elastic.extract import subnetwork_config
        from model import flops
        seq_len = seq_len or self.hp.max_seq_length

        def fwd(config, head="discriminator"):
            return flops.forward_flops_per_token(config, seq_len, head)

        disc = fwd(self.disc_config)
        plain = disc + fwd(self.gen_config, "mlm")
        share = {cell: fwd(subnetwork_config(self.disc_config, s)) / disc
                 for cell, s in self.subnets.items()}
        extra = (share[self.smallest] if self.include_smallest else 0.0) + (
            self.num_sampled * float(np.mean([share[c] for c in self.pool])) if self.num_sampled
            else 0.0)
        return {"relative_step_flops": 1.0 + extra * disc / plain,
                "cell_share_of_discriminator": {self.cell_name(c): v for c, v in share.items()}}

    def export_cells(self, model_dir, log=print):
        """Every cell's discriminator encoder -> <model_dir>/cells/<cell name>/ (keras format)."""
        from elastic.extract import export
        written = {}
        for cell in self.cells:
            directory = os.path.join(model_dir, CELLS_DIR, self.cell_name(cell))
            written[self.cell_name(cell)] = export(self.pretrainer.discriminator,
                                                   self.subnets[cell], directory)
        log(f"exported {len(written)} cells to {os.path.join(model_dir, CELLS_DIR)}")
        return written


# ---------------------------------------------------------------------------------- running
def check_resume_settings(model_dir, settings):
    """Refuse a resume whose elastic settings differ from the stored ones; store them."""
    from base import fileio
    path = os.path.join(model_dir, ELASTIC_FILE)
    if fileio.exists(path):
        stored = json.loads(fileio.read_text(path))
        if stored != settings:
            raise ElasticError(f"{model_dir} was pre-trained with elastic settings {stored}, not "
                               f"{settings}: give the same flags (or another --model_dir)")
    return path


def elastic_pretrain(hp, model_dir, train_files, strategy, vocab_size, log=print,
                     special_ids=None, widths=WIDTH_MULTS, depths=DEPTH_MULTS, num_sampled=2,
                     include_smallest=True, extract_cells=False, hidden_sizes=None, layers=None):
    """Elastic pre-training (or its resume) in `model_dir` with pretrain/task.py's `pretrain`;
    returns the run summary (+ the exported cells with `extract_cells`). `hidden_sizes` (and
    `layers`) train the (L, H) grid instead of widths x depths."""
    import tensorflow as tf
    from pretrain.task import pretrain
    from training import distribution
    from training.state import write_json_atomic
    model_dir = os.fspath(model_dir)
    task = ElasticPretrainingTask(hp, train_files, vocab_size, special_ids, widths, depths,
                                  num_sampled, include_smallest, hidden_sizes, layers)
    settings = task.settings()
    path = check_resume_settings(model_dir, settings)
    cost = task.expected_cost()
    log(f"elastic: grid {len(task.cells)} cells ({task.grid_text()}); per step the full model"
        + (f" + smallest {task.cell_name(task.smallest)}" if task.include_smallest else "")
        + f" + {task.num_sampled} of {len(task.pool)} sampled; expected step cost "
        f"{cost['relative_step_flops']:.2f}x plain pre-training (forward FLOPs)")
    if distribution.is_chief(strategy):
        tf.io.gfile.makedirs(model_dir)
        write_json_atomic(settings, path)
    summary = pretrain(hp, model_dir, train_files, strategy, vocab_size, log=log,
                       special_ids=special_ids, task=task,
                       summary_extra={"elastic": {**settings, **cost}})
    if extract_cells and distribution.is_chief(strategy):
        summary["cells"] = task.export_cells(summary["model_dir"], log)
    return summary


# ---------------------------------------------------------------------------------- command
def define_flags(flags):
    """run_pretraining.py's flags + the elastic ones (once per process)."""
    if "elastic_widths" in flags.FLAGS:
        return
    flags.DEFINE_string("elastic_widths", ",".join(f"{w:g}" for w in WIDTH_MULTS),
                        "Width multipliers of the grid (heads + FFN; hidden size stays full).")
    flags.DEFINE_string("elastic_depths", ",".join(f"{d:g}" for d in DEPTH_MULTS),
                        "Depth multipliers of the grid (DynaBERT's layer rule).")
    flags.DEFINE_string("elastic_hidden_sizes", "",
                        "Hidden sizes of an (L, H) grid instead of widths x depths (the rebuttal's "
                        "128,256,512,768): heads and FFN scale with the hidden size.")
    flags.DEFINE_string("elastic_layers", "", "Layer counts of the (L, H) grid (e.g. 4,6; "
                        "DynaBERT's layer rule; default all layers); needs --elastic_hidden_sizes.")
    flags.DEFINE_integer("num_sampled", 2, "Random cells per step besides the full and the "
                         "smallest one (sandwich rule).")
    flags.DEFINE_boolean("smallest", True, "Train the smallest cell every step.")
    flags.DEFINE_boolean("extract_cells", False, "After training, export every cell's "
                         "discriminator to <model_dir>/cells/w<mw>_d<md>/ (or L<L>_H<H>/).")


def main(argv):
    import run_pretraining as rp
    from base.command import exit_with_error
    FLAGS = rp.FLAGS
    if len(argv) > 1:
        exit_with_error(f"unexpected arguments {' '.join(argv[1:])} (flags are --name=value)")
    from absl import logging as absl_logging
    absl_logging.set_verbosity(absl_logging.WARNING)
    from data.errors import DataError
    from pretrain.hparams import HParamsError
    from training import TrainingError
    from training.distribution import DistributionError, make_strategy
    user_errors = (HParamsError, DataError, DistributionError, TrainingError, ConfigError,
                   rp.UsageError, ElasticError)
    try:
        if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
            raise ElasticError("elastic pre-training runs on the TensorFlow training core "
                               "(KERAS_BACKEND=tensorflow)")
        hidden_sizes = layers = None
        if FLAGS.elastic_hidden_sizes.strip():
            given = [f"--{name}" for name in ("elastic_widths", "elastic_depths")
                     if FLAGS[name].present]
            if given:
                raise ElasticError(f"--elastic_hidden_sizes defines an (L, H) grid: give its "
                                   f"layer counts with --elastic_layers, not {' / '.join(given)}")
            hidden_sizes = parse_sizes(FLAGS.elastic_hidden_sizes, "elastic_hidden_sizes")
            if FLAGS.elastic_layers.strip():
                layers = parse_sizes(FLAGS.elastic_layers, "elastic_layers")
        elif FLAGS.elastic_layers.strip():
            raise ElasticError("--elastic_layers gives the layer counts of the (L, H) grid: it "
                               "needs --elastic_hidden_sizes")
        widths = parse_multipliers(FLAGS.elastic_widths, "elastic_widths")
        depths = parse_multipliers(FLAGS.elastic_depths, "elastic_depths")
        if FLAGS.num_sampled < 0:
            raise ElasticError(f"--num_sampled must be >= 0, got {FLAGS.num_sampled}")
        import tensorflow as tf
        strategy = make_strategy(FLAGS.distribution, FLAGS.tpu, FLAGS.num_cpu_devices,
                                 FLAGS.tpu_zone, FLAGS.gcp_project)
        hp, model_dir, files, special_ids = rp.resolve(FLAGS)
        if hp.deterministic:
            tf.config.experimental.enable_op_determinism()
        summary = elastic_pretrain(hp, model_dir, files, strategy, hp.vocab_size, log=rp.log,
                                   special_ids=special_ids, widths=widths, depths=depths,
                                   num_sampled=FLAGS.num_sampled,
                                   include_smallest=FLAGS.smallest,
                                   extract_cells=FLAGS.extract_cells,
                                   hidden_sizes=hidden_sizes, layers=layers)
    except user_errors as e:
        exit_with_error(e)   # 1; 128 + signal after SIGTERM/SIGINT
    rp._report(summary)


if __name__ == "__main__":
    import run_pretraining  # noqa: F401  (its flags, before absl parses them)
    from absl import app, flags
    define_flags(flags)
    app.run(main)
