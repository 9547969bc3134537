"""Read and write ConvBERT weights in three formats, matching every weight by name.

* "keras" (native): `convbert_config.json` + `model.safetensors` keyed by official TF1 names, in
  the Keras (= TF1) layout. Backend independent, no pickle.
* "hf": `config.json` + `model.safetensors` that `transformers.ConvBertModel.from_pretrained` loads.
  Reading also accepts head checkpoints (keys under `convbert.`) and sharded safetensors.
* "tf1": an official-style TF1 checkpoint (`model.ckpt` + `checkpoint` file, names `electra/...`),
  like the released convbert_{small,medium_small,base} checkpoints; needs TensorFlow.

Read too: a KerasHub preset of ConvBERT (`read_keras_hub_preset`: config.json + model.weights.h5,
with h5py; neither KerasHub nor TensorFlow needed), as keras_hub_convbert/presets.py writes it.

Loading reports missing and unexpected names and refuses to load part of a model: a missing weight
or a weight of another shape is an error naming it, and so is a weight holding NaN or inf (a
diverged run's checkpoint: refused when read, naming the file). Pickle files (`pytorch_model.bin`)
are refused.

Every path goes through `base/fileio.py`, so a checkpoint may be read from and written to a bucket
(`gs://...`) or TensorFlow's in-memory `ram://` as well as a local directory.
"""
import json
import logging
import os
import re
import uuid

import numpy as np

from model.config import ConvBertConfig, ConfigError
from base import fileio
from model import hf_convert

NATIVE_CONFIG = "convbert_config.json"
WEIGHTS_FILE = "model.safetensors"
FORMATS = ("keras", "hf", "tf1")
# Names a checkpoint may hold besides the encoder: heads, generator, optimizer state, step.
_AUXILIARY = re.compile(r"^(generator_predictions|discriminator_predictions|generator|task_specific|"
                        r"classifier|qa_outputs|generator_lm_head|global_step)\b|/adam_[mv]$|"
                        r"^cls\.|position_ids$|token_type_ids$")

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into the requested model."""


# ------------------------------------------------------------------------------------- matching
def assign_weights(targets, source, where, scope="electra"):
    """Copy `source[name]` into each Keras variable `targets[name]`, all or nothing.

    Names of `source` that `targets` lacks are ignored when they are auxiliary (heads, optimizer
    slots) and an error when they belong to the encoder (`<scope>/...`: a model of another size).
    Returns {"missing": [], "unexpected": [...ignored names...]}.
    """
    missing = sorted(set(targets) - set(source))
    unexpected = sorted(set(source) - set(targets))
    foreign = [n for n in unexpected if n.startswith(scope + "/") and not _AUXILIARY.search(n)]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing weight(s), e.g. {', '.join(missing[:3])}")
    if foreign:
        problems.append(f"{len(foreign)} unexpected encoder weight(s), e.g. {', '.join(foreign[:3])}")
    for name in sorted(set(targets) & set(source)):
        want, got = tuple(targets[name].shape), tuple(np.shape(source[name]))
        if want != got:
            problems.append(f"{name} has shape {got} but the model expects {want}")
            break
    if problems:
        raise CheckpointError(f"{where}: checkpoint does not match the model (another size or "
                              f"not a ConvBERT?): {'; '.join(problems)}")
    for name, variable in targets.items():
        variable.assign(np.asarray(source[name], dtype=variable.dtype))
    if unexpected:
        log.info("%s: ignored %d weight(s) the model has no use for (heads, optimizer state), e.g. %s",
                 where, len(unexpected), ", ".join(unexpected[:3]))
    return {"missing": [], "unexpected": unexpected}


# ------------------------------------------------------------------------------------- readers
def _reject_pickle(path):
    raise CheckpointError(f"{path}: pickle checkpoints (pytorch_model.bin) are not loaded, since "
                          "unpickling runs arbitrary code; convert it to safetensors first "
                          "(transformers: model.save_pretrained(dir, safe_serialization=True))")


def check_finite(tensors, where):
    """Refuse weights holding NaN or inf (saved by a run that diverged): one line naming the
    file `where` and the first such weight. Returns `tensors`."""
    bad = [name for name, array in tensors.items() if _non_finite(array)]
    if bad:
        array = np.asarray(tensors[bad[0]], dtype=np.float64)
        raise CheckpointError(
            f"{where}: {len(bad)} weight(s) hold non-finite values, e.g. {bad[0]} "
            f"({int(np.isnan(array).sum())} NaN, {int(np.isinf(array).sum())} inf of "
            f"{array.size}); the run that saved it diverged: use an earlier checkpoint")
    return tensors


def _non_finite(array):
    array = np.asarray(array)
    if array.dtype.kind not in "fc" and array.dtype.name != "bfloat16":
        return False
    return not np.isfinite(array).all()


def _load_safetensors(path):
    """{name: array} of one safetensors file (read as bytes: any filesystem)."""
    from safetensors.numpy import load
    try:
        tensors = load(fileio.read_bytes(path))
    except Exception as e:  # SafetensorError (a truncated or foreign file), or a bad header
        raise CheckpointError(f"{path}: not a readable safetensors file "
                              f"({' '.join(str(e).split()) or type(e).__name__})") from None
    return check_finite(tensors, path)


def _read_safetensors(directory):
    single = os.path.join(directory, WEIGHTS_FILE)
    if fileio.exists(single):
        return _load_safetensors(single)
    index = os.path.join(directory, WEIGHTS_FILE + ".index.json")
    if fileio.exists(index):
        shards = sorted(set(json.loads(fileio.read_text(index))["weight_map"].values()))
        tensors = {}
        for shard in shards:
            tensors.update(_load_safetensors(os.path.join(directory, shard)))
        return tensors
    pickles = fileio.glob(os.path.join(directory, "*.bin"))
    if pickles:
        _reject_pickle(pickles[0])
    raise CheckpointError(f"{directory}: no {WEIGHTS_FILE} found")


def _is_tf1(path):
    if fileio.isdir(path):
        return fileio.exists(os.path.join(path, "checkpoint")) or bool(
            fileio.glob(os.path.join(path, "*.index")))
    return fileio.exists(path + ".index")


def read_tf1_checkpoint(path):
    """All variables of a TF1 checkpoint (a directory with a `checkpoint` file, or a prefix), read
    with NumPy (model/tensor_bundle.py), so TensorFlow need not be installed."""
    from model.tensor_bundle import TensorBundleError, latest_prefix, read_tensor_bundle
    prefix = path
    if fileio.isdir(path):
        prefix = latest_prefix(path)
        if prefix is None:
            raise CheckpointError(f"{path}: no TF1 checkpoint in this directory")
    try:
        variables = read_tensor_bundle(prefix)
    except TensorBundleError as e:
        raise CheckpointError(f"{e} (not a readable TF checkpoint)") from None
    return check_finite(variables, prefix)


def infer_config_from_tf1(variables, where="checkpoint", scope="electra"):
    """Rebuild the encoder config from variable shapes (official sizes are recognised this way)."""
    def get(name):
        if f"{scope}/{name}" not in variables:
            raise CheckpointError(f"{where}: not a ConvBERT checkpoint (no {scope}/{name})")
        return np.shape(variables[f"{scope}/{name}"])

    vocab_size, embedding_size = get("embeddings/word_embeddings")
    layers = {int(m.group(1)) for n in variables
              for m in [re.match(re.escape(scope) + r"/encoder/layer_(\d+)/", n)] if m}
    hidden_size, attention_width = get("encoder/layer_0/attention/self/query/kernel")
    layer0 = f"{scope}/encoder/layer_0/"
    grouped = layer0 + "intermediate/g_dense/kernel" in variables
    if grouped:
        num_groups, _, group_out = np.shape(variables[layer0 + "intermediate/g_dense/kernel"])
        intermediate_size = num_groups * group_out
    else:
        num_groups, intermediate_size = 1, get("encoder/layer_0/intermediate/dense/kernel")[1]
    self_scope = layer0 + "attention/self/"
    official_head_size = 48 if hidden_size == 384 else 64  # heads = H // 64 (H // 48 at 384)
    conv_type, kernel_size, heads_n = "none", 9, None
    if self_scope + "conv_attn_key/depthwise_kernel" in variables:
        conv_type = "sdconv"
        kernel_size = int(np.shape(variables[self_scope + "conv_attn_key/depthwise_kernel"])[0])
        heads_n = int(np.shape(variables[self_scope + "conv_attn_kernel/kernel"])[1]) // kernel_size
    elif self_scope + "conv_attn_kernel/kernel" in variables:
        conv_type = "dynamic"  # N*K columns: the head size decides the split
        heads_n = max(1, attention_width // official_head_size)
        kernel_size = int(np.shape(variables[self_scope + "conv_attn_kernel/kernel"])[1]) // heads_n
    elif self_scope + "lightweight_kernel" in variables:
        conv_type = "lightweight"
        heads_n, kernel_size = (int(s) for s in np.shape(variables[self_scope + "lightweight_kernel"]))
    if heads_n is None:  # bottleneck-only or plain BERT: assume the official head size
        heads_n = max(1, attention_width // official_head_size)
    head_size = attention_width // heads_n
    num_heads = hidden_size // head_size
    head_ratio = max(1, num_heads // heads_n)
    return ConvBertConfig(
        use_self_attention=self_scope + "key/kernel" in variables,
        vocab_size=int(vocab_size), embedding_size=int(embedding_size), hidden_size=int(hidden_size),
        num_hidden_layers=len(layers), num_attention_heads=int(num_heads), head_ratio=int(head_ratio),
        conv_kernel_size=int(kernel_size), num_groups=int(num_groups), conv_type=conv_type,
        intermediate_size=int(intermediate_size),
        max_position_embeddings=int(get("embeddings/position_embeddings")[0]),
        type_vocab_size=int(get("embeddings/token_type_embeddings")[0]))


def resolve_checkpoint(path, config=None):
    """-> (format, config, {TF1 name: array}) for any supported checkpoint path (none of them
    needs TensorFlow to read)."""
    if path.endswith(".bin") or path.endswith(".pt") or path.endswith(".pth"):
        _reject_pickle(path)
    if not fileio.exists(path) and not _is_tf1(path):
        raise CheckpointError(f"{path}: no such file or directory")
    is_dir = fileio.isdir(path)
    if is_dir and not any(fileio.exists(os.path.join(path, f)) for f in
                          (NATIVE_CONFIG, "config.json", "checkpoint")):
        # A pre-training model_dir keeps its exported discriminator one level down.
        for sub in ("discriminator", "export/discriminator"):
            if fileio.exists(os.path.join(path, sub, NATIVE_CONFIG)):
                return resolve_checkpoint(os.path.join(path, sub), config)
    native_config = os.path.join(path, NATIVE_CONFIG) if is_dir else None
    if native_config and fileio.exists(native_config) and not _is_tf1(path):
        return "keras", config or ConvBertConfig.from_json(native_config), _read_safetensors(path)
    if is_dir and fileio.exists(os.path.join(path, "config.json")):
        try:
            hf_config = json.loads(fileio.read_text(os.path.join(path, "config.json")))
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{path}/config.json: invalid JSON ({e.msg})") from None
        try:
            saved = hf_convert.config_from_hf(hf_config, where=os.path.join(path, "config.json"))
        except ConfigError as e:
            raise CheckpointError(str(e)) from None
        config = config or saved
        return "hf", config, _hf_to_tf1_names(_read_safetensors(path), config)
    if _is_tf1(path):
        variables = read_tf1_checkpoint(path)
        if config is None and native_config and fileio.exists(native_config):
            config = ConvBertConfig.from_json(native_config)  # written by save_pretrained("tf1")
        return "tf1", config or infer_config_from_tf1(variables, where=path), variables
    pickles = fileio.glob(os.path.join(path, "*.bin")) if is_dir else []
    if pickles:
        _reject_pickle(pickles[0])
    if is_dir and any(fileio.exists(os.path.join(path, f))
                      for f in (KERAS_HUB_WEIGHTS, KERAS_HUB_SHARDED_WEIGHTS)):
        raise CheckpointError(f"{path}: KerasHub preset is missing {KERAS_HUB_CONFIG}")
    raise CheckpointError(f"{path}: not a ConvBERT checkpoint (expected {NATIVE_CONFIG}, a Hugging "
                          "Face config.json + model.safetensors, or a TF1 checkpoint)")


def _hf_to_tf1_names(tensors, config):
    """HF state dict (bare or under `convbert.`) -> {TF1 name: array in Keras layout}."""
    prefixed = any(k.startswith("convbert.") for k in tensors)
    out = {}
    for key, array in tensors.items():
        bare = key[len("convbert."):] if prefixed and key.startswith("convbert.") else key
        name = _hf_key_to_tf1(bare)
        if name is None:
            out[f"hf:{key}"] = array  # kept so it is reported as unexpected, never silently lost
            continue
        if config.num_groups > 1:  # HF names grouped FFN layers "dense" too
            name = re.sub(r"(/encoder/layer_\d+/(?:intermediate|output))/dense/", r"\1/g_dense/", name)
        out[name] = hf_convert.hf_to_tf1_array(name, np.asarray(array))
    return out


def _hf_key_to_tf1(key):
    top = {hf: tf1 for tf1, hf in hf_convert._TOP_RULES}
    if key in top:
        return "electra/" + top[key]
    heads = {hf: tf1 for tf1, hf in hf_convert._HEAD_RULES}
    if key in heads:
        return heads[key]
    m = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)", key)
    if not m:
        return None
    rest = m.group(2)
    candidates = ["attention/self/query/kernel", "attention/self/query/bias",
                  "attention/self/key/kernel", "attention/self/key/bias",
                  "attention/self/value/kernel", "attention/self/value/bias",
                  "attention/self/conv_attn_key/depthwise_kernel",
                  "attention/self/conv_attn_key/pointwise_kernel", "attention/self/conv_attn_key/bias",
                  "attention/self/conv_attn_kernel/kernel", "attention/self/conv_attn_kernel/bias",
                  "attention/self/conv_attn_point/kernel", "attention/self/conv_attn_point/bias",
                  "attention/output/dense/kernel", "attention/output/dense/bias",
                  "attention/output/LayerNorm/gamma", "attention/output/LayerNorm/beta",
                  "intermediate/dense/kernel", "intermediate/dense/bias",
                  "output/dense/kernel", "output/dense/bias",
                  "output/LayerNorm/gamma", "output/LayerNorm/beta"]
    for cand in candidates:
        if hf_convert.tf1_to_hf_name(f"electra/encoder/layer_0/{cand}") == f"encoder.layer.0.{rest}":
            return f"electra/encoder/layer_{m.group(1)}/{cand}"
    return None


def load_weights_into(model, path, config=None, scope="electra"):
    """Load `path` (any format) into an existing model exposing `weight_map()`."""
    fmt, cfg, tensors = resolve_checkpoint(path, config)
    targets = model.weight_map()
    return assign_weights(targets, tensors, where=path, scope=scope)


def load_pretrained(path, model_cls, config=None, **model_kwargs):
    """Build a `model_cls` (ConvBertModel, ConvBertMaskedLM, ...) as the checkpoint describes (or
    `config`) and load every weight into it. The class is passed in, not imported, so this module
    never imports the encoder (model/encoder.py -> model/checkpoints.py, one way)."""
    path = os.fspath(path)
    fmt, cfg, tensors = resolve_checkpoint(path, config)
    model = model_cls(cfg, **model_kwargs)
    report = assign_weights(model.weight_map(), tensors, where=path)
    model.load_report = {"format": fmt, **report}
    return model


# ------------------------------------------------------------------------------ KerasHub presets
# A preset that `keras_hub_convbert` writes (docs/KERAS_HUB.md): `config.json` names the
# backbone's registered class and holds its arguments, `model.weights.h5` its weights as Keras 3
# saves them. Read here with json and h5py, so a preset is an --init_checkpoint on the TF-free
# JAX path too (KerasHub imports TensorFlow for its text preprocessing).
KERAS_HUB_PACKAGE = "convbert_keras_hub"
KERAS_HUB_BACKBONE = f"{KERAS_HUB_PACKAGE}>ConvBertBackbone"
KERAS_HUB_CONFIG, KERAS_HUB_WEIGHTS = "config.json", "model.weights.h5"
KERAS_HUB_SHARDED_WEIGHTS = "model.weights.json"   # Keras' index of sharded weight files
# ConvBertConfig field -> the backbone's argument (KerasHub's BERT names); the fields of
# KERAS_HUB_CONFIG_ARGS keep their own names.
KERAS_HUB_ARG_OF_FIELD = {
    "vocab_size": "vocabulary_size", "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads", "hidden_size": "hidden_dim",
    "intermediate_size": "intermediate_dim", "embedding_size": "embedding_dim",
    "hidden_act": "hidden_activation", "hidden_dropout_prob": "dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "max_position_embeddings": "max_sequence_length", "type_vocab_size": "num_segments",
    "layer_norm_eps": "layer_norm_epsilon"}
KERAS_HUB_CONFIG_ARGS = ("head_ratio", "conv_kernel_size", "num_groups", "conv_type",
                         "use_self_attention", "num_heads_per_kind", "initializer_range")


def is_keras_hub_preset(path):
    """A KerasHub preset directory: its config.json holds a serialized Keras object (checked
    without importing KerasHub)."""
    path = os.fspath(path)
    config = os.path.join(path, KERAS_HUB_CONFIG)
    if not (fileio.isdir(path) and fileio.isfile(config)):
        return False
    try:
        return "registered_name" in json.loads(fileio.read_text(config))
    except (ValueError, UnicodeDecodeError):
        return False


def keras_hub_arguments(config: ConvBertConfig) -> dict:
    """The ConvBertBackbone constructor's arguments for `config`."""
    fields = config.to_dict()
    args = {arg: fields[field] for field, arg in KERAS_HUB_ARG_OF_FIELD.items()}
    args.update({name: fields[name] for name in KERAS_HUB_CONFIG_ARGS})
    return args


def read_keras_hub_config(path):
    """The preset's config.json as a dict, after checking it serializes a ConvBertBackbone:
    a missing or foreign config is a one-line CheckpointError naming the file."""
    path = os.fspath(path)
    config_path = os.path.join(path, KERAS_HUB_CONFIG)
    if not fileio.isfile(config_path):
        raise CheckpointError(f"{path}: KerasHub preset is missing {KERAS_HUB_CONFIG}")
    try:
        config = json.loads(fileio.read_text(config_path))
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{config_path}: not a JSON file ({e})") from None
    name = config.get("registered_name") if isinstance(config, dict) else None
    if name != KERAS_HUB_BACKBONE:
        raise CheckpointError(f"{config_path}: a KerasHub preset of {name or 'no registered class'}"
                              f", not a ConvBERT ({KERAS_HUB_BACKBONE})")
    return config


def config_from_keras_hub(arguments, where="config.json") -> ConvBertConfig:
    """The ConvBertConfig of a ConvBertBackbone's arguments (its config.json's "config")."""
    if not isinstance(arguments, dict):
        raise CheckpointError(f"{where}: no backbone arguments (\"config\" is not an object)")
    fields = {field: arguments[arg] for field, arg in KERAS_HUB_ARG_OF_FIELD.items()
              if arg in arguments}
    fields.update({name: arguments[name] for name in KERAS_HUB_CONFIG_ARGS if name in arguments})
    try:
        return ConvBertConfig(**fields)
    except (ConfigError, TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: not a ConvBERT backbone's arguments ({e})") from None


def _keras_h5_layers(files, where):
    """{layer path: [arrays]} of Keras 3 `.weights.h5` files (one, or the shards of one): a
    layer's group holds a "vars" group of its variables "0", "1", ... in the layer's order,
    which records the layer's name; the names of a layer and of the layers above it, the saved
    model's own left out, give its path, as its variables' paths (`convbert/layer_0/self/query`)."""
    import io

    import h5py
    groups = {}    # h5 path of a layer's group -> [name or None, {index: array}]

    def visit(name, obj):
        if isinstance(obj, h5py.Group) and (name == "vars" or name.endswith("/vars")):
            entry = groups.setdefault(name[:-len("vars")].rstrip("/"), [None, {}])
            if "name" in obj.attrs:
                entry[0] = _h5_text(obj.attrs["name"])
            for key, dataset in obj.items():
                if isinstance(dataset, h5py.Dataset) and key.isdigit():
                    entry[1][int(key)] = _h5_array(dataset)

    for path in files:
        try:
            data = fileio.read_bytes(path)
        except FileNotFoundError:
            raise CheckpointError(f"{path}: no such file (a shard {where} lists)") from None
        try:
            with h5py.File(io.BytesIO(data), "r") as f:
                f.visititems(visit)
        except (OSError, ValueError, KeyError) as e:
            raise CheckpointError(f"{path}: not a readable Keras weights file "
                                  f"({' '.join(str(e).split())[:200]})") from None
    layers = {}
    for group, (_, arrays) in groups.items():
        if not arrays:
            continue
        parts = group.split("/") if group else []
        names = []
        for depth in range(1, len(parts) + 1):   # the saved model's own group ("") left out
            entry = groups.get("/".join(parts[:depth]))
            if entry is None:
                continue                         # a container (a list of layers): no name
            if entry[0] is None:
                raise CheckpointError(f"{where}: /{group} records no layer name (written by an "
                                      "older Keras?); load the preset with KerasHub and "
                                      "save_to_preset it again")
            names.append(entry[0])
        if sorted(arrays) != list(range(len(arrays))):
            raise CheckpointError(f"{where}: /{group}/vars holds variables {sorted(arrays)}")
        layers["/".join(names)] = [arrays[i] for i in range(len(arrays))]
    return layers


def _h5_text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _h5_array(dataset):
    """A weight as float32 (Keras marks a bfloat16 dataset with a "dtype" attribute)."""
    if _h5_text(dataset.attrs.get("dtype", "")) == "bfloat16":
        import ml_dtypes
        return np.array(dataset, dtype=ml_dtypes.bfloat16).astype(np.float32)
    return np.asarray(dataset, dtype=np.float32)


def read_keras_hub_preset(path, model_cls):
    """("keras_hub", ConvBertConfig, {official TF1 name: array}) of a ConvBERT KerasHub preset's
    backbone, what `resolve_checkpoint` returns for the other formats, without KerasHub (nor
    TensorFlow): `model_cls` (ConvBertModel, passed in as to `load_pretrained`) names the
    weights, a layer's variables being saved in the order the model holds them."""
    path = os.fspath(path)
    config_path = os.path.join(path, KERAS_HUB_CONFIG)
    config = config_from_keras_hub(read_keras_hub_config(path).get("config"), config_path)
    single = os.path.join(path, KERAS_HUB_WEIGHTS)
    index = os.path.join(path, KERAS_HUB_SHARDED_WEIGHTS)
    if fileio.isfile(single):
        where, files = single, [single]
    elif fileio.isfile(index):
        try:
            shards = json.loads(fileio.read_text(index))["weight_map"].values()
            names = sorted({f for v in shards for f in (v if isinstance(v, list) else [v])})
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{index}: not Keras' index of sharded weights ({e!r})") \
                from None
        where, files = index, [os.path.join(path, name) for name in names]
    else:
        raise CheckpointError(f"{path}: KerasHub preset is missing {KERAS_HUB_WEIGHTS}")
    saved = _keras_h5_layers(files, where)
    model = model_cls(config)
    own = {}                                     # layer path -> its variables, in saving order
    for variable in model.weights:
        own.setdefault(variable.path.rpartition("/")[0], []).append(variable)
    slot = {id(v): (layer, i) for layer, variables in own.items() for i, v in enumerate(variables)}
    tensors, used, problems = {}, set(), []
    for name, variable in model.weight_map().items():
        layer, i = slot[id(variable)]
        arrays = saved.get(layer)
        used.add(layer)
        if arrays is None or len(arrays) != len(own[layer]):
            problems.append(f"layer {layer} is missing" if arrays is None else
                            f"layer {layer} has {len(arrays)} weight(s), the model's "
                            f"{len(own[layer])}")
            continue
        want, got = tuple(variable.shape), tuple(np.shape(arrays[i]))
        if want != got:
            problems.append(f"{name} has shape {got} but the model expects {want}")
            continue
        tensors[name] = arrays[i]
    problems = list(dict.fromkeys(problems))
    problems += [f"layer {layer} is not in the model" for layer in sorted(set(saved) - used)]
    if problems:
        raise CheckpointError(f"{where}: the weights do not match {config_path} "
                              f"({len(problems)} problem(s): {'; '.join(problems[:3])})")
    return "keras_hub", config, check_finite(tensors, where)


# ------------------------------------------------------------------------------------- writers
def _write_safetensors(path, tensors, metadata=None):
    from safetensors.numpy import save
    fileio.write_bytes_atomic(path, save({k: np.ascontiguousarray(v) for k, v in tensors.items()},
                                   metadata=metadata))


def write_tf1_checkpoint(directory, tensors, step=0, prefix_name="model.ckpt"):
    """Write {name: array} as a TF1-style checkpoint `directory/model.ckpt-<step>`."""
    import tensorflow as tf
    fileio.makedirs(directory)
    tmp_dir = os.path.join(directory, f".tmp-ckpt-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    fileio.makedirs(tmp_dir)
    base = f"{prefix_name}-{step}"
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=os.path.join(tmp_dir, base), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(np.asarray(tensors[n])) for n in names])
    for f in fileio.listdir(tmp_dir):
        fileio.rename(os.path.join(tmp_dir, f), os.path.join(directory, f))
    fileio.remove_tree(tmp_dir)
    # The state file last: readers find the checkpoint only once all its files are in place.
    state = f'model_checkpoint_path: "{base}"\nall_model_checkpoint_paths: "{base}"\n'
    fileio.write_text_atomic(os.path.join(directory, "checkpoint"), state)
    return os.path.join(directory, base)


def save_pretrained(model, directory, format="keras", scope="electra"):
    """Write `model` (anything with `.config` and `weight_map()`) in `format`. Returns the path."""
    if format not in FORMATS:
        raise ValueError(f"unknown checkpoint format {format!r}; choose one of {', '.join(FORMATS)}")
    directory = os.fspath(directory)
    fileio.makedirs(directory)
    tensors = {name: np.asarray(keras_value(v)) for name, v in model.weight_map().items()}
    config = model.config
    if format == "keras":
        _write_safetensors(os.path.join(directory, WEIGHTS_FILE), tensors,
                           metadata={"format": "convbert-keras"})
        config.to_json(os.path.join(directory, NATIVE_CONFIG))
        return directory
    if format == "tf1":
        # The config beside it settles what shapes cannot (e.g. the head count of conv_type
        # "dynamic"); official checkpoints come without one and are recognised by their shapes.
        config.to_json(os.path.join(directory, NATIVE_CONFIG))
        return write_tf1_checkpoint(directory, tensors)
    hf_config = hf_convert.config_to_hf(config)  # raises for configs HF cannot express
    hf_tensors = {}
    has_heads = any(n.startswith("generator_predictions/") for n in tensors)
    for name, array in tensors.items():
        key = hf_convert.tf1_to_hf_name(name, scope, backbone_prefix="convbert." if has_heads else "")
        if key is None:
            raise CheckpointError(f"no Hugging Face name for weight {name}")
        hf_tensors[key] = hf_convert.tf1_to_hf_array(name, array)
    if has_heads:
        hf_config["architectures"] = ["ConvBertForMaskedLM"]
    _write_safetensors(os.path.join(directory, WEIGHTS_FILE), hf_tensors, metadata={"format": "pt"})
    fileio.write_text_atomic(os.path.join(directory, "config.json"),
                             json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    return directory


def keras_value(variable):
    from keras import ops
    return ops.convert_to_numpy(variable)


class PretrainedIO:
    """`from_pretrained` / `save_pretrained` for a model class with `.config` and `weight_map()`
    (ConvBertModel, ConvBertMaskedLM): the model modules import this one, never the reverse."""

    @classmethod
    def from_pretrained(cls, path, config=None, **kwargs):
        """Load a native, Hugging Face (safetensors) or official TF1 checkpoint."""
        return load_pretrained(path, cls, config=config, **kwargs)

    def save_pretrained(self, directory, format="keras"):
        """Write `format` = "keras" (native), "hf" (transformers-loadable) or "tf1" (official)."""
        return save_pretrained(self, directory, format=format)
