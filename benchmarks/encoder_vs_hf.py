"""The toolkit's ConvBERT forward vs transformers' PyTorch ConvBertModel (docs/PERFORMANCE.md P1).

    python benchmarks/encoder_vs_hf.py [--shapes 8x128,1x512] [--way interleaved|processes|both]
        [--calls tf_function,predict_on_batch,saved_model,jax] [--precision fp32|bf16]
        [--rounds 7] [--size base|small|medium-small|tiny] [--threads 2]
        [--omp_wait_policy PASSIVE] [--json_out PATH]

The reference is always transformers' `ConvBertModel` run eagerly under `torch.inference_mode()`
(fp32; with `--precision bf16` also under `torch.autocast("cpu", dtype=torch.bfloat16)`), eval mode,
a full attention mask. Ours is timed through the calls users make:

* `tf_function`: `tf.function(lambda x: model(x, training=False))` (TF graph, no XLA).
* `predict_on_batch`: Keras' `model.predict_on_batch(x)` on NumPy inputs (TF backend).
* `saved_model`: the `serving_default` signature of the SavedModel that model/export.py writes,
  called on `text` strings. It includes the in-graph tokenization (a synthetic vocab whose words
  `w5`, `w6`, ... are one token each, so the ids are exactly the other calls'); HF's side is the
  forward alone, so this row charges ours for the tokenizer and not HF.
* `jax`: `model.predict_on_batch(x)` under Keras-on-JAX (`KERAS_BACKEND=jax`, its own process:
  the Keras backend is fixed per process).

Two ways (`--way both` runs both):

* `interleaved`: one child process per Keras backend holds both models, with the same weights
  (ours converted to HF with model/hf_convert.py, so both compute the same function). Rounds run
  A, B, A, B, ... after warm-up; ms are medians, the ratio is the median of the per-round ratios.
  Both at `--threads` (default 2): `torch.set_num_threads(n)`; TF intra-op n, inter-op 1
  (`BENCH_INTER_OP` overrides); OMP_NUM_THREADS=n when unset. JAX's XLA CPU client has no thread
  setting: it uses every CPU the process may run on (printed). Nothing else is set;
  `OMP_WAIT_POLICY` only with `--omp_wait_policy`.
* `processes`: each side alone in a fresh child process at its library's defaults: the
  environment this script was started with (no thread settings, no OMP variables added), no
  thread calls. Each child prints the threads its library ends up with. HF's child builds the
  model from the config (random weights: the time does not depend on the values); ratio = ours
  median / HF median, from different processes run one after the other (more sensitive to load
  drift than the interleaved ratio).

Every child sets TF_CPP_MIN_LOG_LEVEL=3 (log lines only) and PYTHONPATH (this checkout).

`--precision bf16`: ours under the Keras dtype policy `mixed_bfloat16` (`--bf16_policy`), the
toolkit's bf16 everywhere (training/core.py) and the counterpart of `torch.autocast`: float32
weights, bf16 compute, float32 where Keras keeps it (softmax, LayerNorm statistics). The
`bfloat16` policy (bf16 weights too, no per-call weight casts) is there to compare. The
agreement of each side's bf16 output with its own fp32 output on the same weights, and ours with
HF's, is printed per shape (interleaved way: max abs error and relative error ||a-b|| / ||b|| of
the final hidden states).

Load: `os.getloadavg()` is recorded at the start and end and before and after every row. The
1-minute average includes this benchmark's own threads (about 2 once it has run a minute), so a
row's own load-before is not a verdict on other jobs. Each row therefore also measures the CPU
that *other* processes used while it was timed: the machine's busy time (/proc/stat, steal
included) minus this process's own (getrusage), per second of wall time, in cores. A ratio counts
(no `*`) when the 1-minute load at the start of the command is <= 1.0 and other processes used
<= 0.2 cores during its row.

`--json_out` writes one JSON object: {"rows": [{shape, call, way, precision, ours_ms, hf_ms, ratio,
threads, loadavg_before, loadavg_after, date}, ...], "others_cpu": [{shape, call, way, cores}, ...]
(the row's other-process CPU, in the rows' order), "counts": [...] (each row's verdict, in the
rows' order), "agreement": [...], "command", "machine", "versions", ...}.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

# The user's environment, before this script (or benchmarks/common.py) sets anything: what the
# "processes" children run under.
USER_ENV = dict(os.environ)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import common  # noqa: E402

CALLS = ("tf_function", "predict_on_batch", "saved_model", "jax")
TF_CALLS = ("tf_function", "predict_on_batch", "saved_model")
WAYS = ("interleaved", "processes")
LOAD_LIMIT = 1.0       # 1-minute load at the start of the command
OTHERS_LIMIT = 0.2     # cores used by other processes during a row
TARGET = 0.5
# Variables that change how a library runs (threads, spin-waiting, oneDNN, XLA): printed as found.
ENV_PREFIXES = ("OMP_", "KMP_", "GOMP_", "MKL_", "DNNL_", "ONEDNN_", "TF_", "XLA_", "JAX_",
                "KERAS_", "TORCH_", "ATEN_")
# A model small enough for CI (HF-convertible: head_ratio 2, head size 16 in both).
TINY = dict(vocab_size=1000, hidden_size=64, embedding_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, max_position_embeddings=512)
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


# --------------------------------------------------------------------------------- helpers
def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        b, _, s = item.strip().partition("x")
        if not (b.isdigit() and s.isdigit() and int(b) > 0 and int(s) > 2):
            raise SystemExit(f"error: --shapes: {item!r} is not BATCHxLENGTH (length > 2)")
        shapes.append((int(b), int(s)))
    return shapes


def loadavg():
    return [round(v, 2) for v in os.getloadavg()]


class OthersMeter:
    """CPU used by processes other than this one between start() and cores() (Linux)."""

    def __init__(self):
        self._start = self._sample()

    @staticmethod
    def _sample():
        import resource
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except OSError:
            return None
        # user nice system idle iowait irq softirq steal: busy = all but idle and iowait
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
        own = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter(), busy, own.ru_utime + own.ru_stime

    def cores(self):
        end = self._sample()
        if end is None or self._start is None:
            return None
        (t0, busy0, own0), (t1, busy1, own1) = self._start, end
        return round(max(0.0, (busy1 - busy0) - (own1 - own0)) / max(t1 - t0, 1e-9), 3)


def now():
    return f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def env_settings(env=None):
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


def loaded():
    """The frameworks imported in this process (HF's child alone should hold torch only)."""
    return "+".join(m for m in ("tensorflow", "jax", "torch") if m in sys.modules)


def n_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def config_for(size):
    from model import ConvBertConfig
    return ConvBertConfig(**TINY) if size == "tiny" else ConvBertConfig.from_size(size)


def inputs_for(vocab_size, b, s):
    """ids [b, s] = [CLS] words [SEP] (word ids >= len(SPECIAL), the synthetic vocab's words)."""
    import numpy as np
    rng = np.random.default_rng(b * 100003 + s)
    ids = rng.integers(len(SPECIAL), vocab_size, (b, s)).astype("int32")
    ids[:, 0], ids[:, -1] = SPECIAL.index("[CLS]"), SPECIAL.index("[SEP]")
    return ids


def agreement(out, ref):
    import numpy as np
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return {"max_abs": float(np.max(np.abs(out - ref))),
            "rel": float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))}


# --------------------------------------------------------------------------------- models
def build_ours(cfg, precision, policy, impl, seed=0):
    """(fp32 model, timed model): the same model for fp32; for bf16 a second model under the
    dtype policy `policy` holding the fp32 model's weights."""
    import keras
    from keras import ops
    from model import ConvBertModel
    from training.seeds import set_random_seed   # keras.utils' without importing TF on JAX
    set_random_seed(seed)
    fp32 = ConvBertModel(cfg, conv_implementation=impl)
    if precision == "fp32":
        return fp32, fp32
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        low = ConvBertModel(cfg, conv_implementation=impl)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    source = fp32.weight_map()
    for name, var in low.weight_map().items():
        # Through NumPy: a copy (on JAX, predict_on_batch donates its variables' buffers, so the
        # two models must not share one).
        var.assign(ops.cast(ops.convert_to_numpy(source[name]), var.dtype))
    return fp32, low


def build_timed_ours(cfg, precision, policy, impl):
    """The timed model only (processes way: no fp32 copy kept)."""
    import keras
    from model import ConvBertModel
    from training.seeds import set_random_seed
    set_random_seed(0)
    if precision == "fp32":
        return ConvBertModel(cfg, conv_implementation=impl)
    keras.mixed_precision.set_global_policy(policy)
    return ConvBertModel(cfg, conv_implementation=impl)


def hf_from_ours(model, cfg):
    """transformers.ConvBertModel holding `model`'s weights (model/hf_convert.py's mapping)."""
    import numpy as np
    import torch
    import transformers
    from model.checkpoints import keras_value
    from model.hf_convert import config_to_hf, tf1_to_hf_array, tf1_to_hf_name
    hf = transformers.ConvBertModel(transformers.ConvBertConfig.from_dict(config_to_hf(cfg)))
    state = {tf1_to_hf_name(name): torch.from_numpy(np.array(
        tf1_to_hf_array(name, np.asarray(keras_value(var), np.float32))))
        for name, var in model.weight_map().items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(("position_ids", "token_type_ids"))]
    if missing or unexpected:
        raise RuntimeError(f"weights do not map onto HF: missing {missing}, unexpected {unexpected}")
    return hf.eval()


def hf_random(hf_config):
    """HF's model from its config alone (transformers and torch only: no Keras, no TensorFlow)."""
    import torch
    import transformers
    torch.manual_seed(0)
    return transformers.ConvBertModel(transformers.ConvBertConfig.from_dict(hf_config)).eval()


def hf_runner(hf, ids, precision):
    import torch
    pt_in = {"input_ids": torch.tensor(ids, dtype=torch.long),
             "attention_mask": torch.ones(ids.shape, dtype=torch.long),
             "token_type_ids": torch.zeros(ids.shape, dtype=torch.long)}

    def run(bf16=precision == "bf16"):
        with torch.inference_mode():
            if bf16:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = hf(**pt_in).last_hidden_state
            else:
                out = hf(**pt_in).last_hidden_state
        return out.float().numpy()
    return run


class OurCalls:
    """Zero-argument runners for each of our calls on one model (returns the output as NumPy)."""

    def __init__(self, model, cfg, tmpdir):
        self.model, self.cfg, self.tmpdir = model, cfg, tmpdir
        self._signatures = {}
        self._tf_function = None
        self._tokenizer = None

    def _signature(self, seq_len):
        """The exported SavedModel's serving_default for this max_seq_length (exported once)."""
        if seq_len not in self._signatures:
            import tensorflow as tf
            import tensorflow_text  # noqa: F401  (registers the tokenizer ops for loading)
            from data.tokenization import Tokenizer
            from model.export import SIGNATURE_KEY, export_savedmodel
            if self._tokenizer is None:
                vocab = os.path.join(self.tmpdir, "vocab.txt")
                with open(vocab, "w") as f:
                    f.write("\n".join(list(SPECIAL) + [f"w{i}" for i in range(
                        len(SPECIAL), self.cfg.vocab_size)]) + "\n")
                self._tokenizer = Tokenizer(vocab, do_lower_case=True)
            path = os.path.join(self.tmpdir, f"serving_{seq_len}")
            export_savedmodel(self.model, self._tokenizer, path, max_seq_length=seq_len)
            loaded = tf.saved_model.load(path)
            self._signatures[seq_len] = (loaded, loaded.signatures[SIGNATURE_KEY])
        return self._signatures[seq_len][1]

    def runner(self, call, ids):
        import numpy as np
        mask, segments = np.ones_like(ids), np.zeros_like(ids)
        np_in = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
        if call in ("predict_on_batch", "jax"):
            return lambda: np.asarray(self.model.predict_on_batch(np_in), np.float32)
        import tensorflow as tf
        if call == "tf_function":
            if self._tf_function is None:
                self._tf_function = tf.function(lambda x: self.model(x, training=False))
            tf_in = {k: tf.constant(v) for k, v in np_in.items()}
            f = self._tf_function
            return lambda: tf.cast(f(tf_in), tf.float32).numpy()
        if call == "saved_model":
            signature = self._signature(ids.shape[1])
            text = tf.constant([" ".join(f"w{i}" for i in row[1:-1]) for row in ids])

            def run():
                out = signature(text=text)
                return tf.cast(out["sequence_output"], tf.float32).numpy()
            return run
        raise ValueError(call)


def ours_threads(backend, pinned):
    cpus = n_cpus()
    if backend == "jax":
        return f"jax: XLA CPU default (all {cpus} CPUs; no thread setting)"
    import tensorflow as tf
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    def show(n):
        return str(n) if n else f"default ({cpus} CPUs)"
    return f"tf: intra-op {show(intra)}, inter-op {show(inter)}" + ("" if pinned else " (untouched)")


def hf_threads():
    import torch
    return (f"torch: {torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} "
            f"inter-op threads")


# --------------------------------------------------------------------------------- children
def child_interleaved(spec):
    """One process, one Keras backend: ours (spec's calls) and HF interleaved, same weights."""
    threads = spec["threads"]
    common.set_threads(threads)       # TF intra-op n, inter-op 1 (imports TF on its backend only)
    import torch
    torch.set_num_threads(threads)
    import keras
    backend = keras.backend.backend()
    cfg = config_for(spec["size"])
    fp32, timed = build_ours(cfg, spec["precision"], spec["bf16_policy"], spec["impl"])
    hf = hf_from_ours(fp32, cfg)
    thread_text = {"ours": ours_threads(backend, True), "hf": hf_threads()}
    print(f"# child ({backend}, interleaved, {loaded()} loaded): {thread_text['ours']}; {thread_text['hf']}; "
          f"env {env_settings() or 'none'}", flush=True)
    rows, agree, others_cpu = [], [], []
    with tempfile.TemporaryDirectory() as tmpdir:
        ours = OurCalls(timed, cfg, tmpdir)
        ours_fp32 = ours if timed is fp32 else OurCalls(fp32, cfg, tmpdir)
        for b, s in spec["shapes"]:
            shape = f"{b}x{s}"
            ids = inputs_for(cfg.vocab_size, b, s)
            runners = {"hf": hf_runner(hf, ids, spec["precision"])}
            runners.update({c: ours.runner(c, ids) for c in spec["calls"]})
            # Agreement, on the same weights: each side against its own fp32 output and HF's.
            hf_fp32 = runners["hf"](bf16=False)
            ours_ref = ours_fp32.runner("jax" if backend == "jax" else "tf_function", ids)()
            agree.append({"shape": shape, "what": f"ours fp32 ({backend}) vs HF fp32",
                          **agreement(ours_ref, hf_fp32)})
            if spec["precision"] == "bf16":
                hf_low = runners["hf"]()
                agree.append({"shape": shape, "what": "HF bf16 (autocast) vs HF fp32",
                              **agreement(hf_low, hf_fp32)})
            for c in spec["calls"]:
                out = runners[c]()
                tag = f"ours {c} {spec['precision']}"
                if spec["precision"] == "bf16" or c != "tf_function":
                    agree.append({"shape": shape, "what": f"{tag} vs ours fp32",
                                  **agreement(out, ours_ref)})
                agree.append({"shape": shape, "what": f"{tag} vs HF {spec['precision']}",
                              **agreement(out, hf_low if spec["precision"] == "bf16" else hf_fp32)})
            before = loadavg()
            meter = OthersMeter()
            times = common.interleaved(runners, rounds=spec["rounds"], warmup=spec["warmup"])
            others, after = meter.cores(), loadavg()
            for c in spec["calls"]:
                rows.append({"shape": shape, "call": c, "way": "interleaved",
                             "precision": spec["precision"],
                             "ours_ms": 1e3 * common.median(times[c]),
                             "hf_ms": 1e3 * common.median(times["hf"]),
                             "ratio": common.ratio_of_medians(times, c, "hf"),
                             "threads": thread_text, "loadavg_before": before,
                             "loadavg_after": after, "date": now()})
                others_cpu.append({"shape": shape, "call": c, "way": "interleaved",
                                   "cores": others})
                print_row(rows[-1], others, spec["load_start"])
    return {"rows": rows, "others_cpu": others_cpu, "agreement": agree, "env": env_settings()}


def child_alone(spec):
    """One side alone at its library's defaults: our `call`, or HF (call "hf"); per-shape medians."""
    call = spec["call"]
    vocab_size = spec["hf_config"]["vocab_size"]
    if call == "hf":
        model = hf_random(spec["hf_config"])
        threads = hf_threads()
    else:
        import keras
        cfg = config_for(spec["size"])
        model = OurCalls(build_timed_ours(cfg, spec["precision"], spec["bf16_policy"],
                                          spec["impl"]), cfg, None)
        threads = ours_threads(keras.backend.backend(), False)
    print(f"# child ({call}, alone, {loaded()} loaded): {threads}; env {env_settings() or 'none'}",
          flush=True)
    out = {"threads": threads, "env": env_settings(), "shapes": {}}
    with tempfile.TemporaryDirectory() as tmpdir:
        if call != "hf":
            model.tmpdir = tmpdir
        for b, s in spec["shapes"]:
            ids = inputs_for(vocab_size, b, s)
            run = hf_runner(model, ids, spec["precision"]) if call == "hf" else model.runner(call, ids)
            before = loadavg()
            meter = OthersMeter()
            times = common.interleaved({call: run}, rounds=spec["rounds"], warmup=spec["warmup"])
            out["shapes"][f"{b}x{s}"] = {"ms": 1e3 * common.median(times[call]),
                                         "others_cpu": meter.cores(),
                                         "loadavg_before": before, "loadavg_after": loadavg(),
                                         "date": now()}
    return out


def run_child(spec, env):
    """Runs this script as `--child SPEC` under exactly `env`; echoes its comment lines."""
    env = dict(env, PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="3")
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child",
                                 json.dumps(spec)], env=env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=err, text=True)
        result = None
        for line in proc.stdout:
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
            else:
                print(line, end="", flush=True)
        if proc.wait() != 0 or result is None:
            err.seek(0)
            raise RuntimeError(f"child {spec.get('call') or spec['backend']} failed "
                               f"(status {proc.returncode}):\n{err.read()[-4000:]}")
    return result


# --------------------------------------------------------------------------------- parent
HEAD = (f"{'shape':>6} {'call':16} {'way':11} {'prec':4} {'ours ms':>9} {'HF ms':>9} "
        f"{'ours/HF':>8} {'<=0.5':5} {'others':>6}  1-min load before -> after")


def counts(others, load_start):
    """A row's ratio counts: a quiet start and other processes idle while it ran."""
    return load_start <= LOAD_LIMIT and others is not None and others <= OTHERS_LIMIT


def print_row(r, others, load_start):
    ok = ("yes" if r["ratio"] <= TARGET else "no") + ("" if counts(others, load_start) else "*")
    shown = "?" if others is None else f"{others:.2f}"
    print(f"{r['shape']:>6} {r['call']:16} {r['way']:11} {r['precision']:4} {r['ours_ms']:9.1f} "
          f"{r['hf_ms']:9.1f} {r['ratio']:8.3f} {ok:5} {shown:>6}  {r['loadavg_before'][0]:.2f} -> "
          f"{r['loadavg_after'][0]:.2f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="8x128,1x512", help="comma list of BATCHxLENGTH")
    ap.add_argument("--calls", default=",".join(CALLS), help="which of ours to time: "
                    + ", ".join(CALLS))
    ap.add_argument("--way", default="both", choices=("interleaved", "processes", "both"))
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--bf16_policy", default="mixed_bfloat16", choices=("mixed_bfloat16", "bfloat16"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--size", default="base", help="small | medium-small | base | tiny (CI)")
    ap.add_argument("--threads", type=int, default=2, help="interleaved way: threads for both")
    ap.add_argument("--omp_wait_policy", default=None,
                    help="interleaved way only: set OMP_WAIT_POLICY (default: not set)")
    ap.add_argument("--conv_implementation", default="auto")
    ap.add_argument("--json_out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        result = child_interleaved(spec) if spec["role"] == "interleaved" else child_alone(spec)
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    shapes = parse_shapes(args.shapes)
    calls = [c.strip() for c in args.calls.split(",") if c.strip()]
    bad = [c for c in calls if c not in CALLS]
    if bad or not calls:
        raise SystemExit(f"error: --calls: unknown {bad}; choose from {', '.join(CALLS)}")
    if args.rounds < 1:
        raise SystemExit("error: --rounds must be at least 1")
    ways = WAYS if args.way == "both" else (args.way,)
    command = "python benchmarks/encoder_vs_hf.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    common.header(f"ConvBERT-{args.size} forward, {args.precision}: ours vs transformers "
                  "(PyTorch eager, inference_mode)", command)
    print(f"# ways: {', '.join(ways)}; calls: {', '.join(calls)}; rounds {args.rounds} after "
          f"{args.warmup} warm-up; {n_cpus()} CPUs; bf16 policy {args.bf16_policy}"
          if args.precision == "bf16" else
          f"# ways: {', '.join(ways)}; calls: {', '.join(calls)}; rounds {args.rounds} after "
          f"{args.warmup} warm-up; {n_cpus()} CPUs")
    print(f"# environment at start (passed unchanged to the 'processes' children): "
          f"{env_settings(USER_ENV) or 'no thread/OMP/TF/XLA variables'}")
    load_start = loadavg()
    print(f"# load average (1, 5, 15 min) before: {load_start}; a ratio counts when the 1-minute "
          f"load at the start is <= {LOAD_LIMIT} and other processes used <= {OTHERS_LIMIT} cores "
          f"during its row ('others'; * = does not count)", flush=True)
    # The parent only reads the config (Keras on its NumPy backend: no TensorFlow here); the
    # children time. HF's child gets HF's config and imports neither Keras nor TensorFlow.
    os.environ["KERAS_BACKEND"] = "numpy"
    from model.config import ConfigError
    from model.hf_convert import config_to_hf
    try:
        hf_config = config_to_hf(config_for(args.size))
    except (ConfigError, ValueError, KeyError) as e:
        raise SystemExit(f"error: --size {args.size}: {e}") from None
    too_long = [f"{b}x{s}" for b, s in shapes if s > hf_config["max_position_embeddings"]]
    if too_long:
        raise SystemExit(f"error: --shapes {too_long}: longer than the model's "
                         f"{hf_config['max_position_embeddings']} positions")
    base = {"shapes": shapes, "hf_config": hf_config, "load_start": load_start[0],
            "rounds": args.rounds, "warmup": args.warmup, "size": args.size,
            "precision": args.precision, "bf16_policy": args.bf16_policy,
            "impl": args.conv_implementation}
    backends = [("tensorflow", [c for c in calls if c in TF_CALLS]),
                ("jax", [c for c in calls if c == "jax"])]
    rows, agree, children, others_cpu = [], [], [], []
    print(HEAD, flush=True)
    if "interleaved" in ways:
        env = dict(USER_ENV)
        env.setdefault("OMP_NUM_THREADS", str(args.threads))
        if args.omp_wait_policy:
            env["OMP_WAIT_POLICY"] = args.omp_wait_policy
        for backend, group in backends:
            if not group:
                continue
            result = run_child(dict(base, role="interleaved", backend=backend, calls=group,
                                    threads=args.threads), dict(env, KERAS_BACKEND=backend))
            rows += result["rows"]
            others_cpu += result["others_cpu"]
            agree += [dict(a, backend=backend) for a in result["agreement"]]
            children.append({"way": "interleaved", "backend": backend, "env": result["env"]})
    if "processes" in ways:
        hf = run_child(dict(base, role="alone", call="hf", backend="torch"), dict(USER_ENV))
        children.append({"way": "processes", "call": "hf", "threads": hf["threads"],
                         "env": hf["env"]})
        for call in calls:
            backend = "jax" if call == "jax" else "tensorflow"
            ours = run_child(dict(base, role="alone", call=call, backend=backend),
                             dict(USER_ENV, KERAS_BACKEND=backend))
            children.append({"way": "processes", "call": call, "threads": ours["threads"],
                             "env": ours["env"]})
            for shape, o in ours["shapes"].items():
                h = hf["shapes"][shape]
                rows.append({"shape": shape, "call": call, "way": "processes",
                             "precision": args.precision, "ours_ms": o["ms"], "hf_ms": h["ms"],
                             "ratio": o["ms"] / h["ms"],
                             "threads": {"ours": ours["threads"], "hf": hf["threads"]},
                             "loadavg_before": o["loadavg_before"],
                             "loadavg_after": o["loadavg_after"], "date": o["date"]})
                # both processes' rows: the larger of the two
                both = [v for v in (o["others_cpu"], h["others_cpu"]) if v is not None]
                others = max(both) if len(both) == 2 else None
                others_cpu.append({"shape": shape, "call": call, "way": "processes",
                                   "cores": others})
                print_row(rows[-1], others, load_start[0])
    load_end = loadavg()
    print(f"# load average (1, 5, 15 min) after: {load_end}")
    if agree:
        print("# agreement of the final hidden states (same weights; max abs, relative ||a-b||/||b||)")
        for a in agree:
            print(f"#   {a['shape']:>6} {a['what']:48} {a['max_abs']:10.3g} {a['rel']:10.3g}")
    if args.json_out:
        import platform
        versions = {}
        for name in ("tensorflow", "keras", "torch", "transformers", "jax"):
            try:
                from importlib.metadata import version
                versions[name] = version(name)
            except Exception:  # not installed
                pass
        result = {"command": command, "date": now(), "machine": common.MACHINE,
                  "processor": platform.processor() or platform.machine(), "cpus": n_cpus(),
                  "size": args.size, "precision": args.precision,
                  "bf16_policy": args.bf16_policy if args.precision == "bf16" else None,
                  "rounds": args.rounds, "warmup": args.warmup, "load_limit": LOAD_LIMIT,
                  "target": TARGET, "loadavg_start": load_start, "loadavg_end": load_end,
                  "env_at_start": env_settings(USER_ENV), "children": children,
                  "versions": versions, "rows": rows, "others_cpu": others_cpu,
                  "counts": [counts(o["cores"], load_start[0]) for o in others_cpu],
                  "others_limit": OTHERS_LIMIT, "agreement": agree}
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
