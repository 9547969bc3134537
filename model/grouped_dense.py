"""Grouped linear layer (ConvBERT's "GL" feed-forward, official `GDense`).

The input features are split into `num_groups` contiguous slices; slice g goes through its own
[in/G, out/G] matrix and lands in output slice g. There is no channel shuffle. The kernel is stored
as [G, in/G, out/G] exactly as the official TF1 (`g_dense/kernel`) and Hugging Face
(`GroupedLinearLayer.weight`) checkpoints store it, so conversion copies it unchanged.
"""
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="convbert")
class GroupedDense(keras.layers.Layer):
    def __init__(self, units, num_groups, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.num_groups = num_groups
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        in_features = input_shape[-1]
        if in_features % self.num_groups or self.units % self.num_groups:
            raise ValueError(f"GroupedDense: num_groups {self.num_groups} must divide input width "
                             f"{in_features} and units {self.units}")
        self.group_in = in_features // self.num_groups
        self.group_out = self.units // self.num_groups
        self.kernel = self.add_weight(name="kernel",
                                      shape=(self.num_groups, self.group_in, self.group_out),
                                      initializer=self.kernel_initializer)
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")

    def call(self, inputs):
        leading = ops.shape(inputs)[:-1]
        grouped = ops.reshape(inputs, (-1, self.num_groups, self.group_in))
        out = ops.einsum("mgi,gio->mgo", grouped, ops.cast(self.kernel, grouped.dtype))
        out = ops.reshape(out, (*leading, self.units))
        return out + ops.cast(self.bias, out.dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "num_groups": self.num_groups,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}
