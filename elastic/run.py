"""DynaBERT training of a fine-tuned ConvBERT, then its (width, depth) grid on the GLUE dev set.

    python run_finetuning.py --task_names mrpc ... --model_dir runs/ft \
        --hparams '{"save_finetuned_model": true}'          # the teacher: runs/ft/finetuned/mrpc
    python -m elastic.run --task_name mrpc --teacher_dir runs/ft/finetuned/mrpc \
        --data_dir ../shared/data/glue --vocab_file vocab.txt --output_dir runs/dynabert_mrpc \
        --phases width,depth[,final] [--width_list 1,0.75,0.5,0.25] [--depth_list 1,0.75,0.5] \
        [--seeds 0,1,2] [--hparams JSON] [--no_grid]

Per seed, under `<output_dir>/seed_<s>/`: `rewired/` (the teacher rewired by importance on a
held-out slice of train: the baseline the grid cuts "plain" sub-networks from), then one
directory per phase with `checkpoints/`, `tensorboard/`, `model/` (encoder + head, native format,
`ConvBertModel.from_pretrained` loads the encoder) and `summary.json`. A rerun skips finished
phases and resumes an interrupted one from its checkpoints (the training core's exact resume).
Then (unless --no_grid) `<output_dir>/grid/`: grid.md, grid.json, grid.png (elastic/grid.py).

Hyper-parameters: fine-tuning's (finetune/hparams.py; learning rate, epochs, batch size, ...)
with --hparams (JSON string or file) on top; `max_seq_length` must match the teacher's
fine-tuning. The training itself: elastic/train.py (a Task of the training core).
"""
from __future__ import annotations

import argparse
import json
import sys

from base import fileio

from elastic.grid import main as _main


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m elastic.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task_name", required=True)
    parser.add_argument("--teacher_dir", required=True,
                        help="fine-tuned encoder + head (<model_dir>/finetuned/<task>)")
    parser.add_argument("--data_dir", required=True, help="GLUE dir (<TASK>/{train,dev}.tsv)")
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--phases", default="width,depth", help="width,depth[,final]")
    parser.add_argument("--width_list", default="1,0.75,0.5,0.25")
    parser.add_argument("--depth_list", default="1,0.75,0.5")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--hparams", default=None,
                        help="JSON object or file of fine-tuning hparams (finetune/hparams.py)")
    parser.add_argument("--no_grid", action="store_true", help="train only")
    return parser.parse_args(argv)


def parse_phases(text):
    from elastic.train import PHASES
    from finetune.console import UsageError
    phases = [p.strip() for p in text.split(",") if p.strip()]
    if not phases or any(p not in PHASES for p in phases) or \
            phases != sorted(set(phases), key=PHASES.index):
        raise UsageError(f"--phases: a comma list of {', '.join(PHASES)} in that order, got "
                         f"{text!r}")
    return phases


def parse_seeds(text):
    from finetune.console import UsageError
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds: not a comma list of integers: {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds: need distinct integers, got {text!r}")
    return seeds


def phase_start(seed_dir, phase, phases):
    """Where a phase's student (and, for depth, teacher) starts: the previous phase's model."""
    from finetune.console import UsageError
    from elastic.train import PHASES
    previous = PHASES[PHASES.index(phase) - 1] if phase != "width" else None
    if previous is None:
        return None
    if previous == "width" and "width" not in phases and \
            not fileio.exists(fileio.join(seed_dir, "width", "summary.json")):
        raise UsageError(f"{seed_dir}/width: the {phase} phase starts from a finished width "
                         "phase; add width to --phases")
    if previous == "depth" and not fileio.exists(fileio.join(seed_dir, "depth", "summary.json")):
        previous = "width"   # final straight after width
    return fileio.join(seed_dir, previous, "model")


def train_seed(task, seed, seed_dir, phases, teacher, features, hp, widths, depths, log=print):
    """The phases of one seed; finished phases (summary.json) are skipped."""
    import keras
    from elastic.train import DynaBertTask, load_finetuned, train_phase
    for phase in phases:
        phase_dir = fileio.join(seed_dir, phase)
        if fileio.exists(fileio.join(phase_dir, "summary.json")):
            log(f"{task} {phase} seed {seed}: already finished ({phase_dir})")
            continue
        keras.utils.set_random_seed(seed)
        start_dir = phase_start(seed_dir, phase, phases)
        start = teacher if start_dir is None else load_finetuned(start_dir, task)[:2]
        phase_teacher = {"width": teacher, "depth": start, "final": None}[phase]
        dyna = DynaBertTask(task, phase, start, phase_teacher, features, hp.train_batch_size,
                            widths, depths, seed=seed, log=log)
        rewired = fileio.join(seed_dir, "rewired") if phase == "width" else None
        summary = train_phase(dyna, hp, phase_dir, log=log, rewired_dir=rewired)
        log(f"{task} {phase} seed {seed}: final loss {summary['history'][-1]['loss']:.4f} "
            f"after {summary['history'][-1]['step']} steps" if summary.get("history") else
            f"{task} {phase} seed {seed}: done")


def run(argv):
    from elastic.train import load_finetuned, parse_multipliers
    from finetune.console import UsageError
    from finetune.glue.tasks import normalize_task_name
    from finetune.hparams import load_hparams
    args = parse_args(argv)
    task = normalize_task_name(args.task_name)
    phases = parse_phases(args.phases)
    seeds = parse_seeds(args.seeds)
    widths = parse_multipliers(args.width_list, "width_list")
    depths = parse_multipliers(args.depth_list, "depth_list")
    hp = load_hparams(args.hparams).for_task(task)
    if not fileio.isdir(args.data_dir):
        raise UsageError(f"{args.data_dir}: --data_dir not found")
    if not fileio.isfile(args.vocab_file):
        raise UsageError(f"{args.vocab_file}: vocab file not found")
    if not fileio.isdir(args.teacher_dir):
        raise UsageError(f"{args.teacher_dir}: --teacher_dir not found")
    blocked = fileio.output_dir_error(args.output_dir, "--output_dir")
    if blocked:
        raise UsageError(blocked)
    teacher_config, teacher_tensors, teacher_path = load_finetuned(args.teacher_dir, task)
    if hp.max_seq_length > teacher_config.max_position_embeddings:
        raise UsageError(f"max_seq_length {hp.max_seq_length} exceeds the teacher's "
                         f"{teacher_config.max_position_embeddings} position embeddings")

    import keras
    if keras.backend.backend() != "tensorflow":
        raise UsageError("elastic.run needs the TensorFlow Keras backend; KERAS_BACKEND is "
                         f"{keras.backend.backend()!r}")
    from data.tokenization import load_tokenizer
    from elastic.grid import grid_from_run
    from finetune.features import convert_examples_to_features as glue_features
    from finetune.glue.splits import load_glue_data
    data = load_glue_data(task, hp, args.data_dir, do_train=True, do_eval=not args.no_grid,
                          do_predict=False)
    tokenizer = load_tokenizer(args.vocab_file, do_lower_case=hp.do_lower_case)
    features = glue_features(data.train, task, tokenizer, hp.max_seq_length)
    fileio.makedirs(args.output_dir)
    fileio.write_text_atomic(fileio.join(args.output_dir, "elastic_run.json"), json.dumps(
        {"task": task, "teacher_dir": teacher_path, "phases": phases, "seeds": seeds,
         "width_list": widths, "depth_list": depths, "hparams": hp.to_dict(),
         "command": "python -m elastic.run " + " ".join(argv)}, indent=2) + "\n")
    print(f"{task}: {len(data.train)} training examples, teacher {teacher_path} "
          f"({teacher_config.num_hidden_layers} layers, hidden {teacher_config.hidden_size})",
          flush=True)
    teacher = (teacher_config, teacher_tensors)
    for seed in seeds:
        train_seed(task, seed, fileio.join(args.output_dir, f"seed_{seed}"), phases, teacher,
                   features, hp, widths, depths, log=lambda m: print(m, flush=True))
    if not args.no_grid:
        dev = glue_features(data.evals[0][1], task, tokenizer, hp.max_seq_length)
        _, paths = grid_from_run(task, args.output_dir, dev, widths, depths, hp.max_seq_length,
                                 fileio.join(args.output_dir, "grid"), seeds=seeds)
        for path in paths:
            print(f"wrote {path}")
    return 0


def main(argv=None):
    from base.command import quiet_tensorflow
    quiet_tensorflow()   # first: no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)
    return _main(argv, run_fn=run)


if __name__ == "__main__":
    sys.exit(main())
