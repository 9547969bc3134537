"""Where a training step's time goes on an accelerator: the JAX core's program of ConvBERT-small
GLUE fine-tuning (bf16, batch 32 x 128) or, with --rtd, of RTD pre-training in the gpu_budget
recipe (bf16, batch 128 x 128, generator 1/4: what reproduce/gpu_budget.py trains with), K =
--steps_per_call steps per compiled call with the state donated, as training runs it; timed,
then traced with the JAX profiler; the device kernels summed by name (top 30) and the
device-busy fraction of the traced wall time.

    KERAS_BACKEND=jax python benchmarks/gpu_profile.py --output_dir=DIR [--steps 20] \
        [--steps_per_call 10] [--electra] [--rtd]

Writes DIR/profile.json (step time, busy fraction, top kernels) and DIR/trace.json.gz (the
Perfetto trace, open in ui.perfetto.dev). Made after the first GPU run measured 19 ms per
fine-tuning step and 230 ms per RTD step at 0.8% MFU (docs/PERFORMANCE.md P4).
"""
import argparse
import collections
import glob
import gzip
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from training.compile_cache import FLAG_HELP as JAX_CACHE_HELP, enable_compile_cache  # noqa: E402


def summarize_trace(path, top=30):
    """{device_busy_us, wall_us, kernels: [[name, total_us, count]]} of a Perfetto trace."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e.get("args", {}).get("name", "") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    device = {pid for pid, name in names.items() if "GPU" in name or "TPU" in name
              or "/device:" in name}
    spans = [e for e in events if e.get("ph") == "X" and e.get("pid") in device]
    if not spans:   # CPU runs: every complete event
        spans = [e for e in events if e.get("ph") == "X"]
    totals = collections.defaultdict(lambda: [0.0, 0])
    for e in spans:
        totals[e["name"]][0] += float(e.get("dur", 0))
        totals[e["name"]][1] += 1
    start = min((e["ts"] for e in spans), default=0)
    end = max((e["ts"] + e.get("dur", 0) for e in spans), default=0)
    return {"device_processes": sorted(names[p] for p in device),
            "device_busy_us": round(sum(t for t, _ in totals.values()), 1),
            "wall_us": round(end - start, 1),
            "kernels": sorted(([n, round(t, 1), c] for n, (t, c) in totals.items()),
                              key=lambda x: -x[1])[:top]}


def finetune_step(args):
    """(jitted step, state, batch): a ConvBERT-small (or ELECTRA-small) SST-2 step, batch 32."""
    import numpy as np
    from finetune.hparams import FinetuneHParams
    from finetune.jax_trainer import JaxFinetuner
    from model import ConvBertConfig
    config = ConvBertConfig.from_size("small")
    if args.electra:
        config = config.replace(conv_type="none", head_ratio=1)
    if args.layers:
        config = config.replace(num_hidden_layers=args.layers)
    hp = FinetuneHParams(model_size="small", precision="bf16").for_task("sst")
    finetuner = JaxFinetuner(config, "sst", hp)
    rng = np.random.default_rng(0)
    batch = {"input_ids": rng.integers(1000, 30000, (32, 128)).astype(np.int32),
             "input_mask": np.ones((32, 128), np.int32),
             "segment_ids": np.zeros((32, 128), np.int32),
             "label_ids": rng.integers(0, 2, 32).astype(np.int32),
             "example_id": np.arange(32, dtype=np.int32)}
    return finetuner.train_program, finetuner.core.example_args(batch, args.steps_per_call)


# The gpu_budget recipe's pre-training settings (reproduce/gpu_recipe.py GPU_BUDGET's pretrain
# and model_size; a benchmark does not import reproduce/, tests/test_gpu_run.py checks that the
# two agree).
RTD_PRETRAIN = dict(model_size="small", train_batch_size=128, max_seq_length=128,
                    learning_rate=5e-4, generator_hidden_size=0.25, temperature=1.0,
                    disc_weight=50.0, precision="bf16")


def rtd_step(args):
    """(program, example args): the gpu_budget recipe's RTD program (the pre-training task on the
    JAX core, `--steps_per_call` steps per call), ConvBERT-small or ELECTRA-small, batch 128 x 128
    of random ids, BERT uncased special ids."""
    import numpy as np
    from pretrain.hparams import make_hparams
    from pretrain.jax_trainer import pretraining_core
    arch = {"conv_type": "none", "head_ratio": 1} if args.electra else {}
    if args.layers:
        arch["num_hidden_layers"] = args.layers
    hp = make_hparams(overrides={**RTD_PRETRAIN, "model_hparam_overrides": arch,
                                 "model_name": "electra" if args.electra else "convbert",
                                 "vocab_size": 30522, "num_train_steps": 1000,
                                 "num_warmup_steps": 100})
    special = {"cls_id": 101, "sep_id": 102, "mask_id": 103}
    _, core = pretraining_core(hp, [], hp.vocab_size, special, log=print)
    b, t = hp.train_batch_size, hp.max_seq_length
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (b, t)).astype(np.int32)
    ids[:, 0], ids[:, -1] = special["cls_id"], special["sep_id"]
    batch = {"input_ids": ids, "input_mask": np.ones((b, t), np.int32),
             "segment_ids": np.zeros((b, t), np.int32)}
    return core.train_program(), core.example_args(batch, args.steps_per_call)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round")
    ap.add_argument("--steps_per_call", type=int, default=10,
                    help="steps inside one compiled call (the core's steps_per_loop)")
    ap.add_argument("--traced_steps", type=int, default=3, help="calls under the profiler")
    ap.add_argument("--electra", action="store_true")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--rtd", action="store_true", help="the RTD pre-training step instead")
    ap.add_argument("--jax_cache_dir", default=None, help=JAX_CACHE_HELP)
    args = ap.parse_args()
    # here, not at import: importing this module (a test does) must not switch the backend of
    # the importing process and of every subprocess it starts
    os.environ.setdefault("KERAS_BACKEND", "jax")
    cache = enable_compile_cache(args.jax_cache_dir)      # before the first compile
    import jax
    from training.jax_programs import seconds_per_step
    os.makedirs(args.output_dir, exist_ok=True)
    out = {"device": jax.devices()[0].device_kind, "jax": jax.__version__,
           "xla_flags": os.environ.get("XLA_FLAGS", ""), "jax_cache_dir": cache}

    def write():
        with open(os.path.join(args.output_dir, "profile.json"), "w") as f:
            json.dump(out, f, indent=2)

    started = time.time()
    step, step_args = (rtd_step if args.rtd else finetune_step)(args)
    out["step"] = "rtd" if args.rtd else "finetune"
    out["batch"] = list(step_args[1]["input_ids"].shape[1:])
    out["steps_per_call"] = args.steps_per_call
    out["build_s"] = round(time.time() - started, 1)
    start = time.time()
    _, step_args = seconds_per_step(step, step_args, 0, rounds=0)    # compiles
    out["compile_s"] = round(time.time() - start, 1)
    calls = max(1, args.steps // args.steps_per_call)
    times, step_args = seconds_per_step(step, step_args, calls, rounds=3, warm_up=False)
    out["step_ms"] = [round(1e3 * t, 3) for t in times]
    print(json.dumps(out), flush=True)
    write()
    trace_dir = tempfile.mkdtemp()
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        seconds_per_step(step, step_args, args.traced_steps, warm_up=False)
    traces = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)
    out["trace_files"] = [os.path.relpath(t, trace_dir) for t in traces]
    if traces:
        shutil.copy(traces[0], os.path.join(args.output_dir, "trace.json.gz"))
        out["trace"] = summarize_trace(traces[0])
    write()
    print(json.dumps(out.get("trace", {}), indent=1)[:6000], flush=True)


if __name__ == "__main__":
    main()
