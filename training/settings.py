"""What a training core needs to train one task (TensorFlow's `training/core.py` and JAX's
`training/jax_core.py` alike); pure Python, so the JAX path imports it without TensorFlow."""
import dataclasses
from typing import Optional


@dataclasses.dataclass
class TrainSettings:
    """What the core needs to train one task; the drivers fill it from their hparams."""
    total_steps: int
    batch_size: int                        # GLOBAL batch, split over the replicas
    learning_rate: float
    warmup_steps: int = 0
    warmup_proportion: float = 0.0         # fine-tuning: warm-up = proportion * total_steps
    lr_decay_power: float = 1.0
    weight_decay_rate: float = 0.01
    clip_norm: Optional[float] = 1.0
    layerwise_lr_decay: Optional[float] = None   # fine-tuning: decay ** (L + 2 - depth)
    num_layers: Optional[int] = None             # ... over this many encoder layers
    precision: str = "fp32"
    jit_compile: Optional[bool] = None           # None: on for one GPU, else off
    log_every: int = 100
    steps_per_loop: int = 1                      # steps inside one compiled call (TPU: ~200)
    save_every: Optional[int] = None
    keep_checkpoints: int = 5
    export_on_save: bool = True

    def warmup(self, total_steps):
        return max(int(self.warmup_steps), int(total_steps * self.warmup_proportion))
