"""Counter-based random numbers and Gumbel-max sampling in `keras.ops` (TensorFlow and JAX alike).

Every random number of the pre-training objective is a pure function of
(seed, global step, example id, stream, counter): no RNG state is carried between steps. Hence

* a global batch split over several replicas draws exactly the numbers one device draws (each
  example carries its global `example_id`), and
* a run resumed at step k draws what an uninterrupted run draws at step k.

The generator is a small integer hash on uint32 (Chris Wellons' "lowbias32" finaliser, a bijection
with good avalanche), applied to keys combined with xor. Results are bit-identical on every backend
(uint32 multiply wraps, shifts are logical), and uniforms use the top 24 bits, so the float mapping
is exact too.
"""
import numpy as np
from keras import ops

_M1 = 0x7FEB352D
_M2 = 0x846CA68B
_GOLDEN = 0x9E3779B9

# Stream constants: independent sub-streams of one (seed, step, example) key.
STREAM_MASK_POSITIONS = 0x243F6A88
STREAM_MASK_REPLACE = 0x85A308D3
STREAM_GUMBEL = 0x13198A2E
STREAM_VOCAB = 0x03707344


def _const(value):
    return ops.convert_to_tensor(np.asarray(value & 0xFFFFFFFF, dtype=np.uint32))


def _arange_u32(n):
    # TF has no uint32 Range kernel; uint32 itself is used because TF runs int32 arithmetic on the
    # host, while its uint32 Mul / AddV2 / BitwiseXor / RightShift kernels run on the GPU.
    return ops.cast(ops.arange(n, dtype="int32"), "uint32")


def to_uint32(x):
    """Any integer tensor -> uint32 (two's-complement wrap)."""
    x = ops.convert_to_tensor(x)
    if x.dtype != "uint32":
        if "int" not in str(x.dtype):
            raise TypeError(f"random keys must be integers, got {x.dtype}")
        x = ops.cast(x, "uint32")
    return x


def mix32(x):
    """lowbias32 finaliser: a bijective avalanche hash of uint32 values."""
    x = ops.bitwise_xor(x, ops.right_shift(x, _const(16)))
    x = ops.multiply(x, _const(_M1))
    x = ops.bitwise_xor(x, ops.right_shift(x, _const(15)))
    x = ops.multiply(x, _const(_M2))
    return ops.bitwise_xor(x, ops.right_shift(x, _const(16)))


def example_keys(seed, step, example_id):
    """[B] uint32 key of each example at a given step: hash of (seed, step, example_id)."""
    key = mix32(ops.bitwise_xor(to_uint32(seed), _const(0x6A09E667)))
    key = mix32(ops.bitwise_xor(key, to_uint32(step)))
    return mix32(ops.bitwise_xor(key, to_uint32(example_id)))


def stream_keys(keys, stream):
    return mix32(ops.bitwise_xor(keys, _const(stream)))


def counter_bits(keys, num):
    """[...] keys -> [..., num] uint32 hashes of (key, counter) for counter = 0..num-1."""
    counters = ops.multiply(_arange_u32(num), _const(_GOLDEN))
    return mix32(ops.add(ops.expand_dims(keys, -1), counters))


def bits_to_uniform(bits):
    """uint32 -> float32 uniform in [0, 1) on a 2**-24 grid (exact on every backend)."""
    return ops.multiply(ops.cast(ops.right_shift(bits, _const(8)), "float32"),
                        np.float32(2.0 ** -24))


def uniform(keys, num):
    """[B] keys -> [B, num] float32 uniforms in [0, 1)."""
    return bits_to_uniform(counter_bits(keys, num))


def uniform_grid(keys, num_rows, num_cols):
    """[B] keys -> [B, num_rows, num_cols] uniforms (one hash per element after per-row keys)."""
    row_keys = counter_bits(keys, num_rows)                                    # [B, R]
    col_keys = mix32(ops.add(ops.multiply(_arange_u32(num_cols), _const(_GOLDEN)),
                             _const(STREAM_VOCAB)))                            # [C]
    return bits_to_uniform(mix32(ops.bitwise_xor(ops.expand_dims(row_keys, -1), col_keys)))


def gumbel_noise(u):
    """The official noise: -log(-log(u + 1e-9) + 1e-9)."""
    return -ops.log(-ops.log(u + 1e-9) + 1e-9)


def sample_from_softmax(logits, keys, temperature=1.0, disallow=None):
    """Gumbel-max sample from softmax(logits / temperature), [B, P, V] -> int32 ids [B, P].

    `keys` are [B] per-example keys (see `example_keys`); the noise of example b, slot p and vocab
    entry v depends on nothing else. `disallow` ([B, P, V] 0/1) lowers those logits by 1000, as the
    official `disallow_correct`. No gradient flows into the sample.
    """
    logits = ops.stop_gradient(ops.cast(logits, "float32")) / float(temperature)
    if disallow is not None:
        logits = logits - 1000.0 * ops.cast(disallow, "float32")
    noise = gumbel_noise(uniform_grid(stream_keys(keys, STREAM_GUMBEL), ops.shape(logits)[1],
                                      ops.shape(logits)[2]))
    return ops.cast(ops.argmax(logits + noise, axis=-1), "int32")
