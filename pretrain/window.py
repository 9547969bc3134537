"""A log window of pre-training: metric sums over its steps -> the record the progress line,
TensorBoard and the summary JSON show (loss, generator / discriminator loss and accuracy, AUC).
Pure numpy: the TensorFlow task (pretrain/task.py) and the JAX trainer (pretrain/jax_trainer.py)
both summarize with it."""
import numpy as np

AUC_BINS = 200   # histogram bins of discriminator scores: the window AUC without every score


def auc_from_histograms(pos, neg):
    """ROC AUC from per-bin counts of positive / negative scores (ties within a bin count 1/2)."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    n_pos, n_neg = pos.sum(), neg.sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    neg_below = np.cumsum(neg) - neg
    return float(np.sum(pos * (neg_below + 0.5 * neg)) / (n_pos * n_neg))


def summarize(hp, sums):
    """{loss, gen_loss, gen_accuracy, disc_loss, disc_accuracy, disc_auc} of a window's sums."""
    gen = float(sums["gen_loss"]) / max(float(sums["gen_weight"]), 1e-6)
    gen_acc = float(sums["gen_accuracy"]) / max(float(sums["gen_weight"]), 1e-6)
    disc = float(sums["disc_loss"]) / max(float(sums["disc_weight"]), 1e-6)
    disc_acc = float(sums["disc_accuracy"]) / max(float(sums["disc_weight"]), 1e-6)
    total = hp.gen_weight * gen + hp.disc_weight * disc if hp.electra_objective else gen
    return {"loss": total, "gen_loss": gen, "gen_accuracy": gen_acc, "disc_loss": disc,
            "disc_accuracy": disc_acc,
            "disc_auc": auc_from_histograms(sums["auc_pos"], sums["auc_neg"])}


def describe(record):
    return (f"| loss {record['loss']:.4f} | gen loss {record['gen_loss']:.4f} acc "
            f"{record['gen_accuracy']:.3f} | disc loss {record['disc_loss']:.4f} acc "
            f"{record['disc_accuracy']:.3f} auc {record['disc_auc']:.3f}")
