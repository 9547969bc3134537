"""The training core on Keras-on-JAX, without TensorFlow: what training/core.py is for tf.distribute.

    core = JaxTrainingCore(settings, log=print).build(task)    # training/task.py, settings.py
    summary = core.fit_task(checkpoint_dir=..., export_dir=..., summary_path=...)

It runs the same `Task` objects as TensorFlow's core: the task builds its models, names its
variables and computes its loss and metric sums with keras.ops; the core owns the rest, as
`TrainingCore` does on TensorFlow. It is built so that an accelerator, not the host, sets the
pace:

* the program: one `jax.jit` runs up to K = `steps_per_loop` steps (a `lax.fori_loop` over a
  [K, B, ...] block of batches). Each step is the task's `loss_denominators` + `compute` inside a
  `keras.StatelessScope` that swaps every variable for the step's value, under
  `jax.value_and_grad`, then `optimizer.stateless_apply`; RNG and other state variables
  (`task.state_variables()`) are threaded through. The number of steps is an argument: a call
  of fewer than K (at a log or save boundary, or the end) runs the same program on a padded
  block and loops over its real batches only, so one program serves the whole run;
* the state: a `TrainState` (trainable, non-trainable and optimizer values, the step counter on
  the device), DONATED to the program: each call updates it in place instead of landing in fresh
  buffers. Keras variables never share a buffer with it (they get copies at save points and the
  final values at the end);
* the learning rate: computed on the device from the step counter and the schedule's
  `arguments()` (training/optimization.py `LinearWarmupLinearDecay.value_at`), an argument of
  the program, so one compiled program serves any run length and peak rate: fine-tuning reuses
  it across tasks and trials (`fit_task(program=...)`), and a run can choose its length after
  timing its first steps;
* metrics: summed over the call's steps on the device, in the same program; the host reads
  them once per call (with `steps_per_loop` = `log_every`, once per log line);
* the input: training/device_input.py `BlockPrefetcher`, a thread that stacks the next
  block of the task's `host_batches` and puts it on the device while the current one trains;
* the optimizer: training/settings.py `build_optimizer`, TensorFlow's core's (ELECTRA's AdamW,
  warm-up / decay, layer-wise LR decay, global-norm clipping);
* devices and processes (training/jax_distribution.py): `keras.distribution.DataParallel`
  over the local devices (`use_devices`; the drivers' `--distribution` flags say how many:
  `jax_num_devices`): blocks are split along their batch axis, the state replicated, one SPMD
  program, the one-device loss (so the task's denominators are the global ones without a
  collective of its own); a global batch the devices do not divide is a one-line error
  (`check_batch_size`). Several processes (hosts, `start_processes`: JAX's own
  `jax.distributed`): the DataParallel spans every process's devices, each process feeds its
  rows of the global batch (`process_batches`) and process 0 writes the checkpoints, exports
  and summaries (`is_writer`), which all read;
* state on disk: `<checkpoint_dir>/ckpt-<step>.safetensors` (training/state.py; every variable
  incl. optimizer and RNG state, the step and examples counters), written atomically through
  base/fileio.py, keep-N, restored exactly (the task's `host_batches` skips the consumed
  batches);
* the loop: TensorFlow's own host loop, training/loop.py (non-finite guard, progress line with
  the task's window summary, lr, seq/s, elapsed and ETA, saves, history, the summary JSON), and
  its TensorBoard scalars (`fit_task(log_dir=...)` or a caller's `writer`: training/summaries.py
  writes them without TensorFlow, the tags TensorFlow's core writes, the task's
  `scalar_prefix`).

Programs are compiled ahead of their first call where a caller wants it
(training/jax_programs.py `PrecompilableStep`, `precompile`). `fit_task` reads as its four
parts: `_restore`, `_train` (the loop, saving at its save points), then the newest values
assigned to the variables and `task.export`. One name per concept: the `TrainState` (what a
program call takes and returns), its `step` counter, the `train_program()` and
`predict_program(fn)` (compiled programs) and their `ProgramArgs`. Same `TrainSettings` as
TensorFlow's core; not here: loss scaling (mixed_float16).
"""
import functools
import os
import time
from typing import Any, NamedTuple

import numpy as np

from training.jax_distribution import (agreed_stop, is_writer, lost_peer_as_error,
                                       num_replicas, process_batches, process_local_variables,
                                       replicated)
from training.jax_programs import PrecompilableStep
from training.loop import TrainingError, call_sizes, largest_call, run_loop
from training.settings import set_precision, zero_optimizer_state
from training.state import (CHECKPOINT_NAME, finish_run, restore_safetensors_checkpoint,
                            save_safetensors_checkpoint)


class TrainState(NamedTuple):
    """What a compiled call of the core takes, donates and returns (a JAX pytree)."""
    trainable: list        # values of the trained variables, in `named_variables()` order
    non_trainable: list    # values of `task.state_variables()` (RNG state)
    optimizer: list        # values of `optimizer.variables` (moments, iterations, learning rate)
    step: Any              # int32 scalar: updates applied so far (drives masking RNG and the lr)

    def values(self):
        """(trainable, non_trainable, optimizer): the variables' values, group by group."""
        return self.trainable, self.non_trainable, self.optimizer


class ProgramArgs(NamedTuple):
    """A train program's arguments (`JaxTrainingCore.train_program`): what it is compiled for,
    called with and timed on."""
    state: TrainState
    block: Any                # [K, B, ...] batches, K = the largest call
    num_steps: Any            # int32: the block's real batches (the rest is padding)
    schedule_arguments: Any   # the learning-rate schedule's (training/optimization.py)


def copy_state(state):
    """A copy of every array of `state` on the same devices (what a donated call may consume
    while the original lives on)."""
    import jax
    import jax.numpy as jnp
    return jax.tree_util.tree_map(jnp.copy, state)


def learning_rate_slot(optimizer):
    """Index of the optimizer's `learning_rate` variable in `optimizer.variables` (a Keras
    optimizer built with a float learning rate keeps it there; one built with a schedule has
    none): where the core's program writes each step's rate."""
    slots = [i for i, v in enumerate(optimizer.variables) if v.name == "learning_rate"]
    if len(slots) != 1:
        raise TrainingError("the JAX core needs an optimizer built with a float learning_rate "
                            "(it keeps a `learning_rate` variable), not a schedule")
    return slots[0]


# ------------------------------------------------------------------------------ the core
class JaxTrainingCore:
    GROUPS = ("trainable", "non_trainable", "optimizer")

    def __init__(self, settings, log=print, label=""):
        self.settings = settings
        self.log = log
        self.label = label
        self.task = self.optimizer = self.schedule = None

    # ------------------------------------------------------------------ a Task
    def build(self, task):
        """Precision, the task's models, its variables and the optimizer (training/settings.py
        `build_optimizer`, its learning rate in a variable the program writes each step's rate
        into). Returns self."""
        from training.settings import build_optimizer
        set_precision(self.settings.precision)
        self.task = task
        # Several processes: `train_state` makes the process-local variables global in one go.
        with process_local_variables():
            self.model = task.build()
            named = dict(task.named_variables())
            self.trainable = list(named.values())
            self.non_trainable = list(task.state_variables())
            self.optimizer, self.schedule = build_optimizer(self.settings, named,
                                                            learning_rate_variable=True)
            self.optimizer.build(self.trainable)
        self.num_params = int(sum(np.prod(v.shape) for v in self.trainable))
        return self

    def task_variables(self):
        """(trainable, state, optimizer variables) of the built task: a TrainState's `values`."""
        return self.trainable, self.non_trainable, self.optimizer.variables

    def train_state(self, step=0, copy=True):
        """A TrainState of the variables' current values at `step`; copies by default (a
        program call donates what it is given)."""
        import jax
        import jax.numpy as jnp
        from training.device_input import replicated_sharding
        sharding = replicated_sharding()
        # The counter where the program's output puts it (replicated): the second call then
        # has the first's input shardings, no second trace and compile.
        step = (jnp.asarray(step, jnp.int32) if sharding is None
                else jax.device_put(np.int32(step), sharding))
        if jax.process_count() > 1:    # fresh global arrays: nothing to copy
            return TrainState(*([replicated(v.value, sharding) for v in group]
                                for group in self.task_variables()), step=step)
        state = TrainState(*([v.value for v in group] for group in self.task_variables()),
                           step=step)
        return copy_state(state) if copy else state

    def task_state(self):
        """The variables' current values, not copied: (trainable, state, optimizer) lists; the
        first two are a `predict_program`'s first arguments."""
        return self.train_state(copy=False).values()

    def train_program(self):
        """The compiled train program of the built task (see `_program` for its signature)."""
        import keras
        task, trainable_vars, state_vars = self.task, self.trainable, self.non_trainable

        def forward(trainable, state, batch, step):
            mapping = list(zip(trainable_vars, trainable)) + list(zip(state_vars, state))
            with keras.StatelessScope(state_mapping=mapping) as scope:
                loss, metrics = task.compute(batch, step, task.loss_denominators(batch))
            new_state = []
            for variable, value in zip(state_vars, state):
                current = scope.get_current_value(variable)
                new_state.append(value if current is None else current)
            return loss, metrics, new_state

        return self._program(forward, self.optimizer)

    def example_args(self, batch, steps=None):
        """ProgramArgs of the `train_program()` for a block of `steps` copies of `batch`
        (default: the settings' largest call): what `precompile` lowers, and what a benchmark
        times. The state is a copy of the variables' values."""
        from training.device_input import block_sharding, stack_block, to_device
        steps = steps or largest_call(self.settings)
        block = to_device(stack_block([batch] * steps, steps), block_sharding())
        return ProgramArgs(self.train_state(), block, np.int32(steps),
                           self.schedule.arguments())

    def predict_program(self, fn):
        """A jitted (trainable values, state values, batch) -> fn(batch), run with the built
        task's variables swapped for those values (inference: nothing is updated); a
        PrecompilableStep. Its first two arguments are `task_state()[:2]`. With several
        processes the batch is this process's rows and the outputs are every row's, on each."""
        import jax
        import keras
        from training.device_input import replicated_sharding
        trainable_vars, state_vars = self.trainable, self.non_trainable

        def predict(trainable, state, batch):
            mapping = list(zip(trainable_vars, trainable)) + list(zip(state_vars, state))
            with keras.StatelessScope(state_mapping=mapping):
                return fn(batch)

        # Several processes: each feeds its rows (`process_rows`), and the outputs come back
        # replicated, gathered inside the program, so every process reads all of them.
        several = jax.process_count() > 1
        return PrecompilableStep(jax.jit(predict, out_shardings=replicated_sharding()
                                         if several else None), log=self.log)

    def set_settings(self, settings):
        """Other settings for the built task (a run's length, peak learning rate, warm-up, log
        and save intervals), with the schedule they make. A compiled program stays valid; what
        is compiled into it (weight decay, clipping, layer-wise decay, precision, and the steps
        per call `largest_call`) must not change."""
        self.settings = settings
        self.schedule = settings.schedule()

    def reset(self):
        """Optimizer state (Adam moments, iterations) back to zero on the same variables, so the
        compiled program is reused (fine-tuning trials)."""
        zero_optimizer_state(self.optimizer)

    def fit_task(self, checkpoint_dir=None, export_dir=None, summary_path=None,
                 summary_extra=None, started_at=None, program=None, after_save=None,
                 checkpoint_every=None, log_dir=None, writer=None):
        """Train the built task from the newest checkpoint of `checkpoint_dir` (or step 0) to
        settings.total_steps; `task.export(export_dir)` at the end, with the trained values
        assigned back to the variables. program: a `train_program()` to reuse (one is compiled
        otherwise). after_save(step): called at every save point (every `save_every` steps and
        at the end, with or without a `checkpoint_dir`) with the current values assigned to the
        variables (held-out curves). checkpoint_every: write the checkpoint only at save points
        that are a multiple of it (and at the end); after_save still sees every save point.
        log_dir: TensorBoard scalars of every log window there (None: none), or `writer`, a
        training/summaries.py ScalarWriter the caller keeps open (fine-tuning adds its dev
        scalars to it), as TensorFlow's `TrainingCore.fit`."""
        import jax
        from training.summaries import scalar_writer
        task = self.task
        started_at = time.time() if started_at is None else started_at
        program = program or self.train_program()
        step, examples, last_saved = self._restore(checkpoint_dir)
        with scalar_writer(writer, log_dir if is_writer() else None) as writer:
            result = self._train(program, self.train_state(step), examples, last_saved,
                                 checkpoint_dir, after_save, checkpoint_every,
                                 label=task.label or self.label, writer=writer)
        if export_dir is not None and is_writer():
            task.export(export_dir)
        return finish_run(self.settings, result, started_at, self.num_params, extra={
            "backend": "jax", "distribution": f"JAX {jax.default_backend()} x{num_replicas()}"
            + (f" over {jax.process_count()} processes" if jax.process_count() > 1 else ""),
            **(summary_extra or {})}, summary_path=summary_path, writes=is_writer())

    # ------------------------------------------------------------------ the program
    def _program(self, forward, optimizer):
        """jit(state, block, num_steps, schedule_arguments) -> (state, metric sums): the first
        `num_steps` of the block's K batches each run forward + backward + AdamW (the rest are
        padding); the state is donated. forward(trainable, non_trainable, batch, step) -> (loss,
        metric sums, new non_trainable values). Metric sums include `loss` and `grad_norm`."""
        import jax
        import jax.numpy as jnp
        from training.optimization import LinearWarmupLinearDecay
        lr_slot = learning_rate_slot(optimizer)

        def loss_fn(trainable, non_trainable, batch, step):
            loss, metrics, non_trainable = forward(trainable, non_trainable, batch, step)
            loss = loss.astype(jnp.float32)
            metrics = {k: jnp.asarray(v).astype(jnp.float32) for k, v in metrics.items()}
            return loss, ({**metrics, "loss": loss}, non_trainable)

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

        def one_step(state, batch, schedule_arguments):
            optimizer_vars = list(state.optimizer)
            slot = optimizer_vars[lr_slot]
            rate = LinearWarmupLinearDecay.value_at(state.step, schedule_arguments)
            optimizer_vars[lr_slot] = jnp.asarray(rate, slot.dtype).reshape(slot.shape)
            (_, (metrics, non_trainable)), grads = grad_fn(state.trainable, state.non_trainable,
                                                           batch, state.step)
            metrics["grad_norm"] = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in grads))
            trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads,
                                                                  state.trainable)
            return TrainState(trainable, non_trainable, optimizer_vars, state.step + 1), metrics

        def run(state, block, num_steps, schedule_arguments):
            first = jax.tree_util.tree_map(lambda v: v[0], block)
            if jax.tree_util.tree_leaves(block)[0].shape[0] == 1:
                return one_step(state, first, schedule_arguments)
            shapes = jax.eval_shape(one_step, state, first, schedule_arguments)[1]
            zeros = {k: jnp.zeros(v.shape, v.dtype) for k, v in shapes.items()}

            def body(index, carry):
                state, sums = carry
                batch = jax.tree_util.tree_map(
                    lambda v: jax.lax.dynamic_index_in_dim(v, index, keepdims=False), block)
                state, metrics = one_step(state, batch, schedule_arguments)
                return state, {k: sums[k] + metrics[k] for k in sums}

            # A loop of `num_steps` (a traced count): the block's padding is never trained on.
            return jax.lax.fori_loop(0, num_steps, body, (state, zeros))

        return PrecompilableStep(jax.jit(run, donate_argnums=0), log=self.log)

    # ------------------------------------------------------------------ fit_task's parts
    def _names(self):
        return [[f"{group}/{i}/{v.path}" for i, v in enumerate(group_vars)]
                for group, group_vars in zip(self.GROUPS, self.task_variables())]

    def _flat(self, state):
        return {n: v for group_names, group in zip(self._names(), state.values())
                for n, v in zip(group_names, group)}

    def _restore(self, checkpoint_dir):
        """(step, examples consumed, checkpoint path) of the newest checkpoint, its values
        assigned to the variables; (0, 0, None) without one."""
        if checkpoint_dir is None:
            return 0, 0, None
        restored = restore_safetensors_checkpoint(checkpoint_dir,
                                                  self._flat(self.train_state(copy=False)))
        if restored is None:
            return 0, 0, None
        values, step, examples, last_saved = restored
        for names, group in zip(self._names(), self.task_variables()):
            for name, variable in zip(names, group):
                variable.assign(values[name])
        self.log(f"resumed from {last_saved} at step {step}")
        return step, examples, last_saved

    def _train(self, program, state, examples, last_saved, checkpoint_dir, after_save,
               checkpoint_every, label, writer=None):
        """The host loop (training/loop.py) over `program` from `state`, each call's state (the
        previous one donated) the next one's; the LoopResult. Blocks come from the task's
        `host_batches` through a BlockPrefetcher; `writer`: the TensorBoard scalars (a
        ScalarWriter; None: none). At the end, also on an error or a signal, the newest values
        the run reached are assigned to the variables (as TensorFlow's core leaves them), unless
        a failed call consumed them."""
        import jax
        from training.device_input import BlockPrefetcher, block_sharding
        s = self.settings
        start_step = int(state.step)
        schedule_arguments = self.schedule.arguments()
        blocks = BlockPrefetcher(process_batches(self.task, examples // s.batch_size),
                                 call_sizes(s, start_step), largest_call(s),
                                 sharding=block_sharding())

        several = jax.process_count() > 1
        # A lost process: one line whose advice follows whether this run writes checkpoints.
        checkpoints = checkpoint_dir is not None

        def run_steps(step):
            nonlocal state
            num, block = blocks.next()
            with lost_peer_as_error(several, checkpoints):
                state, sums = program(state, block, np.int32(num), schedule_arguments)
                return num, jax.device_get(sums)   # the call's one host read

        def save(step, stopping=False):
            path = None
            due = (not checkpoint_every or step % checkpoint_every == 0
                   or step == s.total_steps or stopping)
            if checkpoint_dir is not None and due:
                consumed = examples + (step - start_step) * s.batch_size
                if is_writer():   # written once (the state is replicated), read by all
                    path = save_safetensors_checkpoint(checkpoint_dir, self._flat(state), step,
                                                       consumed, s.keep_checkpoints)
                else:   # process 0 saves at this step too (a stop is agreed: agreed_stop)
                    path = os.path.join(checkpoint_dir, f"{CHECKPOINT_NAME}-{step}.safetensors")
            if after_save is not None and not stopping:    # a stop is no save point
                self._assign(copy_state(state))
                after_save(step)
            return path

        saving = checkpoint_dir is not None or after_save is not None
        try:
            return run_loop(s, start_step, run_steps, summarize=self.task.summarize,
                            describe=self.task.describe, schedule=self.schedule,
                            save=save if saving else None, last_saved=last_saved,
                            log=self.log, label=label, writer=writer,
                            scalar_prefix=self.task.scalar_prefix,
                            agree_stop=functools.partial(agreed_stop, checkpoints=checkpoints)
                            if several else None)
        finally:
            blocks.close()
            if not any(x.is_deleted() for x in jax.tree_util.tree_leaves(state)):
                self._assign(state)

    def _assign(self, state):
        for group, values in zip(self.task_variables(), state.values()):
            for variable, value in zip(group, values):
                variable.assign(value)
