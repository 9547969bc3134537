"""The JAX core's input on the device ahead of time: blocks of K batches, stacked and uploaded by a
background thread while the current block trains.

    blocks = BlockPrefetcher(task.host_batches(skip), sizes, capacity=K)
    num, block = blocks.next()     # block: {name: [K, B, ...] device array}; num <= K real steps
    blocks.close()

`sizes` is the number of steps of each compiled call, in order (training/loop.py
`steps_this_call`), so the thread takes exactly the batches the run consumes: a checkpoint's
example count stays the steps times the batch, and exact resume holds. A call of fewer than K
steps gets a block padded with zeros to K (one compiled program serves every call; the padded
steps are skipped on the device, training/jax_core.py). Any iterator of dicts of NumPy arrays
serves: the TF-free TFRecord reader (data/tfrecord_io.py) and the bundle's arrays
(data/pretraining_arrays.py) alike. An error in the reader (a bad record) is raised by `next`.

A batch is any pytree of arrays (a dict of features; the language model's one array of token
blocks). The blocks go to the device with the batch axis (axis 1) split over the devices when a
Keras `DataParallel` distribution is set, else to the default device; with several processes
each process's batches are its rows of the global batch (training/jax_distribution.py
`process_batches`), put on its own devices as its part of one global array. int64 arrays
(`example_id`) become int32 unless JAX runs with x64, as jit would convert them.
"""
import queue
import threading

import numpy as np

_DONE = object()


def stack_block(batches, capacity):
    """[batches] -> the same structure (a dict of arrays, or one array: any pytree) with
    [capacity, B, ...] leaves, zeros after the last batch."""
    import jax

    def stack(*leaves):
        first = np.asarray(leaves[0])
        out = np.zeros((capacity,) + first.shape, first.dtype)
        for i, leaf in enumerate(leaves):
            out[i] = leaf
        return out

    return jax.tree_util.tree_map(stack, *batches)


def block_sharding(batch_axis=1):
    """Where a block goes: split along its batch axis over a DataParallel's devices, else None
    (the default device). `batch_axis=0`: where one batch goes (`batch_sharding`)."""
    import keras
    distribution = keras.distribution.distribution()
    if isinstance(distribution, keras.distribution.DataParallel):
        from jax.sharding import NamedSharding, PartitionSpec
        mesh = distribution.device_mesh
        return NamedSharding(mesh.backend_mesh,
                             PartitionSpec(*[None] * batch_axis, mesh.axis_names[0]))
    return None


def replicated_sharding():
    """A value every device of a DataParallel holds whole (the step counter), else None."""
    import keras
    distribution = keras.distribution.distribution()
    if isinstance(distribution, keras.distribution.DataParallel):
        from jax.sharding import NamedSharding, PartitionSpec
        return NamedSharding(distribution.device_mesh.backend_mesh, PartitionSpec())
    return None


def batch_sharding():
    """Where one batch ([B, ...] leaves: a predict step's) goes: split along B over a
    DataParallel's devices, else None."""
    return block_sharding(batch_axis=0)


def to_device(block, sharding=None):
    """A stacked block as device arrays (int64 -> int32 without x64), without waiting for the
    copy to finish. Where the sharding spans other processes' devices too (several processes),
    `block` holds this process's rows only and becomes its part of the global array."""
    import jax
    if not jax.config.jax_enable_x64:
        block = jax.tree_util.tree_map(
            lambda v: v.astype(np.int32) if v.dtype == np.int64 else v, block)
    if sharding is not None and not sharding.is_fully_addressable:
        return jax.tree_util.tree_map(
            lambda v: jax.make_array_from_process_local_data(sharding, v), block)
    return jax.device_put(block, sharding) if sharding is not None else jax.device_put(block)


class BlockPrefetcher:
    """Blocks of `sizes[i]` batches of `batches`, padded to `capacity`, on the device `depth`
    blocks ahead (see the module doc). Close it (or use it as a context manager) to stop the
    thread."""

    def __init__(self, batches, sizes, capacity, depth=2, sharding=None):
        self.capacity = int(capacity)
        self._queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(batches, sizes, sharding),
                                        name="block-prefetcher", daemon=True)
        self._thread.start()

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self, batches, sizes, sharding):
        try:
            for num in sizes:
                if self._stop.is_set():
                    return
                if not 0 < num <= self.capacity:
                    raise ValueError(f"a block of {num} steps does not fit {self.capacity}")
                try:
                    taken = [next(batches) for _ in range(num)]
                except StopIteration:
                    raise RuntimeError("the training input ended before the run's last "
                                       "step") from None
                block = to_device(stack_block(taken, self.capacity), sharding)
                if not self._put((num, block)):
                    return
            self._put(_DONE)
        except BaseException as e:   # handed to the consumer: `next` raises it
            self._put(e)
        finally:
            # A generator's readers (data/tfrecord_io.py's decode workers) end with it.
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def next(self):
        """(number of real steps, block) of the next call; raises the reader's error."""
        item = self._queue.get()
        if item is _DONE:
            raise StopIteration("no more blocks planned")
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self):
        self._stop.set()
        self._thread.join(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
